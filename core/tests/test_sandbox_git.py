"""git in the test sandbox: a read-only view of the run's repository (core/sandbox_git.py)
that names no server path and cannot be written."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.sandbox import limits_from_settings, sandboxed_process
from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from pipelines.tests.repositories import committed_repository, git
from repos.services.linking import repository_link
from repos.services.worktrees import worktree_create

pytestmark = [pytest.mark.django_db, needs_bwrap]


@pytest.fixture
def worktree(project, tmp_path: Path) -> Path:
    repo = committed_repository(tmp_path / "repos" / "app", {"a.txt": "one\n", "setup.py": "print('x')\n"})
    git(repo, "remote", "add", "origin", f"{tmp_path}/somewhere/secret-origin.git")
    git(repo, "config", "filter.trap.clean", f"touch {tmp_path}/filter-ran")
    linked = repository_link(project=project, path=str(repo))
    path = tmp_path / "worktrees" / "task-1-run-1"
    path.parent.mkdir(parents=True, exist_ok=True)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=path)
    # A second run's worktree: its record in the repository names its server path.
    worktree_create(repository=linked, branch="autocoder/task-2-run-1", path=tmp_path / "worktrees" / "task-2-run-1")
    sandbox_status(refresh=True)
    return path


def sandboxed(worktree: Path, command: str) -> tuple[int, str]:
    limits = dataclasses.replace(limits_from_settings())
    with sandboxed_process(command=command, workspace=worktree, limits=limits) as process:
        assert process.stdout is not None
        output = process.stdout.read().decode("utf-8", errors="replace")
        code = process.wait(timeout=60)
    return code, output


def test_git_reads_the_worktrees_history_and_status(worktree: Path, tmp_path: Path) -> None:
    base = git(worktree, "rev-parse", "HEAD")
    (worktree / "a.txt").write_text("two\n")
    code, output = sandboxed(worktree, "git log --oneline -1 && git status --porcelain && git describe --always")
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0].startswith(base[:7]) and "Initial" in lines[0]
    assert " M a.txt" in lines
    assert lines[-1] == base[:7]
    # The diff too, and the branch's name.
    code, output = sandboxed(worktree, "git diff --stat && git rev-parse --abbrev-ref HEAD")
    assert code == 0 and "a.txt" in output and "autocoder/task-1-run-1" in output, output


def test_nothing_inside_names_a_server_path(worktree: Path, tmp_path: Path, settings) -> None:
    code, output = sandboxed(
        worktree,
        "cat .git; git config --list --show-origin; git worktree list; git remote -v; git reflog -1; "
        "cat /.git-repository/config; ls /.git-repository/worktrees; echo end",
    )
    assert code == 0 and output.rstrip().endswith("end"), output
    assert "gitdir: /.git-worktree" in output
    for secret in (str(tmp_path), settings.REPOS_ROOT, settings.WORKTREES_ROOT, "secret-origin", "filter.trap"):
        assert secret not in output, secret
    assert "task-2-run-1" not in output


def test_the_repository_cannot_be_written_from_inside(worktree: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repos" / "app"
    before = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    head_before = git(worktree, "rev-parse", "HEAD")
    objects_before = sorted(str(p) for p in (repo / ".git" / "objects").rglob("*"))
    (worktree / "a.txt").write_text("two\n")
    _, output = sandboxed(
        worktree,
        "git -c user.name=x -c user.email=x@y commit -qam sneaky 2>&1; echo commit=$?; "
        "git tag sneaky 2>&1; echo tag=$?; "
        "echo x > /.git-repository/HEAD 2>&1; echo head=$?; "
        "echo x > /.git-worktree/HEAD 2>&1; echo wt=$?; "
        "touch /.git-repository/objects/x 2>&1; echo obj=$?",
    )
    for step in ("commit", "tag", "head", "wt", "obj"):
        assert f"{step}=0" not in output, output
    assert git(repo, "for-each-ref", "--format=%(refname) %(objectname)") == before
    assert git(worktree, "rev-parse", "HEAD") == head_before
    assert sorted(str(p) for p in (repo / ".git" / "objects").rglob("*")) == objects_before
    assert not (tmp_path / "filter-ran").exists()
    # The pointer git wrote is still the worktree's, and git on the server still works.
    assert (worktree / ".git").read_text().startswith(f"gitdir: {repo}/.git/worktrees/")
    assert git(worktree, "status", "--porcelain") == "M a.txt"


def test_a_worktree_of_a_repository_outside_the_root_keeps_the_neutral_pointer(
    worktree: Path, tmp_path: Path, settings
) -> None:
    settings.REPOS_ROOT = str(tmp_path / "elsewhere")
    _, output = sandboxed(worktree, "cat .git; git status 2>&1; echo end")
    assert "repository-not-available-in-the-sandbox" in output and str(tmp_path) not in output


def test_alternates_naming_server_paths_are_hidden(worktree: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "objects"
    elsewhere.mkdir(parents=True)
    alternates = tmp_path / "repos" / "app" / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{elsewhere}\n")
    code, output = sandboxed(worktree, "cat /.git-repository/objects/info/alternates; git log --oneline -1 2>&1")
    assert code == 0 and "Initial" in output, output
    assert str(tmp_path) not in output


def test_a_sha256_repository_keeps_its_object_format(project, tmp_path: Path) -> None:
    repo = tmp_path / "repos" / "sha"
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--object-format=sha256", "--initial-branch=main")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "--quiet", "-m", "Initial")
    linked = repository_link(project=project, path=str(repo))
    path = tmp_path / "worktrees" / "task-1-run-1"
    path.parent.mkdir(parents=True, exist_ok=True)
    base = worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=path)
    sandbox_status(refresh=True)
    code, output = sandboxed(path, "git rev-parse HEAD && git config --list")
    assert code == 0 and base in output and len(base) == 64, output
    assert "extensions.objectformat=sha256" in output
