"""Whole-file writes for an ACP agent (repos/editor_whole.py): what the server writes in a
worktree its sandbox's account owns stays that account's, so the agent's own tools can
write it next."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repos.editor_whole import editor_write_whole, owned_like_the_worktree

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand files to another account")


def test_a_file_and_the_folders_written_for_the_agent_are_its_accounts(tmp_path: Path) -> None:
    worktree = tmp_path / "worktree"
    (worktree / "src").mkdir(parents=True)
    (worktree / "src" / "app.py").write_text("x = 1\n")
    for path in (worktree, worktree / "src", worktree / "src" / "app.py"):
        os.chown(path, NOBODY, NOBODY)

    for relative in ("src/app.py", "new/deep/file.py"):
        written = editor_write_whole(worktree, f"/workspace/{relative}", "y = 2\n", roots=("/workspace",))
        assert os.stat(worktree / written).st_uid == 0  # the server's, as written
        owned_like_the_worktree(worktree, written)

    for path in ("src/app.py", "new", "new/deep", "new/deep/file.py"):
        status = os.stat(worktree / path)
        assert (status.st_uid, status.st_gid) == (NOBODY, NOBODY), path
    assert os.stat(tmp_path).st_uid == 0  # nothing above the worktree


def test_a_worktree_the_server_owns_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    os.chown(tmp_path / "a.py", NOBODY, NOBODY)
    owned_like_the_worktree(tmp_path, "a.py")
    assert os.stat(tmp_path / "a.py").st_uid == NOBODY
