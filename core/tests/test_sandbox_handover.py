"""Handing a worktree with a restored environment to a command and taking it back:
the environment's files (hard links of a kept copy) are never the command's and are
not looked at where their folder did not change; what the command made there is taken
back like anything else."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from core import sandbox_handover
from core.sandbox import ProjectSandbox, limits_from_settings, sandboxed_process
from core.sandbox_accounts import storage_ids
from core.sandbox_handover import _chown_tree, workspace_reclaim
from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap

FILES = 300


@pytest.fixture
def worktree_with_environment(tmp_path: Path, settings) -> tuple[Path, Path]:
    """A worktree whose ``env/`` holds hard links of a kept copy (as a restore leaves
    it), and that kept copy; both the storage account's."""
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    settings.REPOS_ROOT = str(tmp_path / "repos")
    kept = tmp_path / "kept" / "env"
    worktree = tmp_path / "worktrees" / "task-1-run-1"
    for folder in ("pkg", "pkg/sub"):
        (kept / folder).mkdir(parents=True)
    for index in range(FILES):
        (kept / "pkg" / f"m{index}.py").write_text(f"X = {index}\n")
    (kept / "pkg" / "sub" / "data.txt").write_text("kept\n")
    worktree.mkdir(parents=True)
    (worktree / "app.py").write_text("print('hello')\n")
    for folder, _, files in os.walk(kept):
        target = worktree / "env" / Path(folder).relative_to(kept)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            os.link(Path(folder, name), target / name)
    ids = storage_ids()
    if ids is not None:
        for root in (tmp_path / "kept", worktree):
            for path in [root, *root.rglob("*")]:
                os.chown(path, *ids, follow_symlinks=False)
    sandbox_status(refresh=True)
    return worktree, kept


def run(worktree: Path, command: str) -> str:
    with sandboxed_process(
        command=command, workspace=worktree, limits=limits_from_settings(), project=ProjectSandbox(kept=("env",))
    ) as process:
        assert process.stdout is not None
        output = process.stdout.read().decode()
        process.wait()
    return output


@needs_bwrap
def test_a_command_replaces_restored_files_and_adds_its_own_and_all_is_taken_back(worktree_with_environment) -> None:
    worktree, kept = worktree_with_environment
    output = run(
        worktree,
        "echo more >> env/pkg/sub/data.txt 2>/dev/null; echo append=$?; "
        "rm env/pkg/m1.py && echo 'X = 100' > env/pkg/m1.py && echo replaced; "
        "echo new > env/pkg/sub/new.txt && cp /bin/true env/pkg/sub/tool && chmod 4755 env/pkg/sub/tool && "
        "mkdir env/made && echo x > env/made/file && echo made",
    )

    assert "Permission denied" in output and "append=0" not in output
    assert "replaced" in output and "made" in output
    assert (kept / "pkg" / "sub" / "data.txt").read_text() == "kept\n"
    assert (kept / "pkg" / "m1.py").read_text() == "X = 1\n", "the kept copy is untouched"
    assert (worktree / "env" / "pkg" / "m1.py").read_text() == "X = 100\n"
    ids = storage_ids()
    for path in [worktree, *worktree.rglob("*")]:
        info = os.lstat(path)
        if ids is not None:
            assert (info.st_uid, info.st_gid) == ids, path
        assert not info.st_mode & stat.S_ISUID, path
    assert (worktree / "env" / "pkg" / "sub" / "new.txt").read_text() == "new\n"


def test_taking_back_looks_only_at_folders_the_command_changed(worktree_with_environment, monkeypatch) -> None:
    worktree, _ = worktree_with_environment
    uid = 200_063  # a pool uid: what a command's account is
    marks = _chown_tree(worktree, uid, uid, kept=("env",))
    assert os.lstat(worktree / "env" / "pkg").st_uid == uid, "its folders are the command's"
    assert os.lstat(worktree / "env" / "pkg" / "m2.py").st_uid != uid, "its files are not"
    # The command adds a file in one folder only.
    (worktree / "env" / "pkg" / "sub" / "late.txt").write_text("late\n")
    os.chown(worktree / "env" / "pkg" / "sub" / "late.txt", uid, uid)
    looked_at: list[str] = []
    real_lstat = os.lstat

    def counting_lstat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        looked_at.append(str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(sandbox_handover.os, "lstat", counting_lstat)
    workspace_reclaim(worktree, kept=("env",), marks=marks)
    monkeypatch.undo()

    inside_pkg = [path for path in looked_at if path.startswith(str(worktree / "env" / "pkg") + "/m")]
    assert inside_pkg == [], "the unchanged folder's 300 files were not looked at"
    assert str(worktree / "env" / "pkg" / "sub" / "late.txt") in looked_at
    ids = storage_ids()
    if ids is not None:
        assert (os.lstat(worktree / "env" / "pkg" / "sub" / "late.txt").st_uid, os.lstat(worktree / "env").st_uid) == (
            ids[0],
            ids[0],
        )


def test_without_marks_everything_is_looked_at_as_before(worktree_with_environment) -> None:
    worktree, _ = worktree_with_environment
    uid = 200_062
    _chown_tree(worktree, uid, uid)  # no kept paths: every file with one name is handed over
    (worktree / "env" / "pkg" / "sub" / "late.txt").write_text("late\n")
    os.chown(worktree / "env" / "pkg" / "sub" / "late.txt", uid, uid)
    workspace_reclaim(worktree)
    ids = storage_ids()
    if ids is not None:
        assert os.lstat(worktree / "env" / "pkg" / "sub" / "late.txt").st_uid == ids[0]
        assert os.lstat(worktree / "env" / "pkg").st_uid == ids[0]


def test_kept_paths_never_lead_out_of_the_worktree(tmp_path: Path) -> None:
    roots = sandbox_handover.kept_roots(tmp_path / "w", [".venv", "../other", "/etc", "", "a/../../b", "node_modules"])
    assert roots == {str(tmp_path / "w" / ".venv"), str(tmp_path / "w" / "node_modules")}


@needs_bwrap
def test_what_a_command_writes_into_a_restored_environment_counts_against_its_disk_limit(
    worktree_with_environment,
) -> None:
    from dataclasses import replace

    from core.sandbox_limits import DISK_LIMIT_EXCEEDED
    from repos.verify import run_test_command

    worktree, _ = worktree_with_environment
    limits = replace(limits_from_settings(), disk_mb=5, file_size_mb=8)

    def run_limited(command: str):  # type: ignore[no-untyped-def]
        return run_test_command(
            command=command,
            cwd=worktree,
            timeout=60,
            limits=limits,
            max_output_chars=10_000,
            on_output=lambda text: None,
            should_cancel=lambda: False,
            project=ProjectSandbox(kept=("env",)),
        )

    # The environment's own files (hard links of the kept copy) are not the command's.
    assert run_limited("echo fine").passed
    over = run_limited("dd if=/dev/urandom of=env/pkg/sub/big bs=1M count=7 2>/dev/null; echo done")
    assert not over.passed and DISK_LIMIT_EXCEEDED.format(mb=5) in over.output
    # What a command left there is nobody's to write but the storage account's.
    (worktree / "env" / "pkg" / "sub" / "big").unlink(missing_ok=True)
    made = run_limited("umask 000; echo small > env/pkg/open.txt; ls -l env/pkg/open.txt")
    assert made.passed
    mode = stat.S_IMODE(os.lstat(worktree / "env" / "pkg" / "open.txt").st_mode)
    assert not mode & (stat.S_IWGRP | stat.S_IWOTH), oct(mode)
