"""The test processes' scratch folders (config/settings/scratch_folders.py): one base,
and nothing left behind by a process that exits or is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from config.settings.scratch_folders import (
    process_scratch_folder,
    process_started,
    scratch_base,
    stale_folders_remove,
)

# Imports the test settings as every test process does, then waits to be killed.
TEST_PROCESS = "import config.settings.test, sys; print('ready', flush=True); sys.stdin.read()"


def exited_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_folder_of_a_process_gone_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    base = scratch_base(tmp_path)
    me = os.getpid()
    mine = base / f"{me}-{process_started(me)}-abc"
    gone = base / f"{exited_pid()}-12345-def"
    # The same id, but a process that started at another moment: the id was reused.
    reused = base / f"{me}-1-ghi"
    not_ours = base / "README"
    for folder in (mine, gone, reused):
        (folder / "repos").mkdir(parents=True)
    not_ours.write_text("")

    assert sorted(stale_folders_remove(base)) == sorted([gone, reused])
    assert sorted(base.iterdir()) == sorted([mine, not_ours])


def test_the_base_must_be_a_folder_of_this_users(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"autocoder-test-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(RuntimeError, match="is not a folder of this user's"):
        scratch_base(tmp_path)


@pytest.mark.slow
def test_a_killed_test_process_leaves_nothing_once_the_next_one_has_run(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)

    def start() -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", TEST_PROCESS],
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        return process

    killed = start()
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert list(tmp_path.iterdir()), "the killed process made no folder"

    following = start()
    following.communicate("", timeout=60)
    assert following.returncode == 0
    leftovers = [path.relative_to(tmp_path) for path in tmp_path.rglob("*")]
    assert leftovers == [Path(f"autocoder-test-{os.getuid()}")]


WORKTREES = "import config.settings.test as s, sys; print(s.WORKTREES_ROOT, flush=True); sys.stdin.read()"


def test_a_worker_a_test_starts_keeps_its_worktrees_in_the_tests_folder_past_its_death() -> None:
    # A worker killed mid-phase leaves its run's worktree for the worker that resumes the
    # run; its own folder was removed by the next process to start, and the run paused.
    from tests.workers import subprocess_env

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", WORKTREES],
            cwd=settings.BASE_DIR,
            env=subprocess_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    doomed = start()
    assert doomed.stdout is not None
    worktrees = Path(doomed.stdout.readline().strip())
    assert worktrees.parent == process_scratch_folder()  # this test process's folder
    (worktrees / "task-1-run-1").mkdir(parents=True, exist_ok=True)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    successor = start()  # removes the folders of processes that are gone
    try:
        assert successor.stdout is not None and successor.stdout.readline()
        assert (worktrees / "task-1-run-1").is_dir()
    finally:
        successor.kill()
        successor.wait()
