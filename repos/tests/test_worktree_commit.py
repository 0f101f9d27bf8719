"""The commit rule at the git level (repos/services/commits.py ``worktree_pending``,
``worktree_commit``): tracked changes and the Coder's new files are committed, exactly
— by literal paths, whatever characters they hold — and every other new path is listed
as left out, cheaply (folders collapsed, ignored files not looked at)."""

from __future__ import annotations

from pathlib import Path

import pytest

from repos.models import Repository
from repos.services.commits import LEFT_OUT_MAX_ENTRIES, worktree_commit, worktree_pending
from repos.services.linking import repository_link
from repos.services.worktrees import worktree_create
from repos.tests.test_services import git, make_repo

pytestmark = pytest.mark.django_db


@pytest.fixture
def repo(tmp_path: Path, settings) -> Path:
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    return make_repo(tmp_path / "repos" / "app")


@pytest.fixture
def linked(project, repo: Path) -> Repository:
    return repository_link(project=project, path="app")


@pytest.fixture
def worktree(linked: Repository, tmp_path: Path) -> Path:
    path = tmp_path / "worktrees" / "task-1-run-1"
    path.parent.mkdir(parents=True, exist_ok=True)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=path)
    return path


def committed(repo: Path, base: str) -> list[str]:
    return sorted(git(repo, "diff", "--name-only", "-z", base, "autocoder/task-1-run-1").split("\x00")[:-1])


def test_paths_are_taken_literally(linked: Repository, repo: Path, worktree: Path) -> None:
    base = git(repo, "rev-parse", "main")
    (worktree / "docs").mkdir()
    (worktree / "docs" / "a *b.md").write_text("the Coder's\n")
    (worktree / "docs" / "a xb.md").write_text("a test's: the glob 'a *b.md' would take it\n")
    (worktree / ":(glob)x").write_text("the Coder's, named like pathspec magic\n")
    written = {"docs/a *b.md", ":(glob)x"}

    pending = worktree_pending(repository=linked, worktree=worktree, written=written)
    worktree_commit(repository=linked, worktree=worktree, message="Odd names\n", pending=pending)

    assert committed(repo, base) == [":(glob)x", "docs/a *b.md"]
    assert pending.left_out == [{"path": "docs/", "files": 1}]


def test_a_tracked_file_replaced_by_a_folder_commits_the_deletion_only(
    linked: Repository,
    repo: Path,
    worktree: Path,
) -> None:
    base = git(repo, "rev-parse", "main")
    (worktree / "a.txt").unlink()
    (worktree / "a.txt").mkdir()
    (worktree / "a.txt" / "made-by-a-test").write_text("x\n")

    pending = worktree_pending(repository=linked, worktree=worktree, written=set())
    worktree_commit(repository=linked, worktree=worktree, message="Gone\n", pending=pending)

    assert pending.changes == [{"action": "delete", "file_path": "a.txt"}]
    assert committed(repo, base) == ["a.txt"]
    # The removal by name did not take the folder's file along.
    assert git(repo, "ls-tree", "-r", "--name-only", "autocoder/task-1-run-1") == ""


def test_ignored_files_are_not_listed_and_a_long_list_is_cut(
    linked: Repository,
    repo: Path,
    worktree: Path,
) -> None:
    # What setup restores (a virtualenv), ignored the way git is told to.
    (repo / ".git" / "info" / "exclude").write_text(".venv/\n")
    (worktree / ".venv" / "lib").mkdir(parents=True)
    (worktree / ".venv" / "lib" / "site.py").write_text("")
    for number in range(LEFT_OUT_MAX_ENTRIES + 5):
        (worktree / f"out-{number:03}.log").write_text("")

    pending = worktree_pending(repository=linked, worktree=worktree, written=set())

    assert not any(entry["path"].startswith(".venv") for entry in pending.left_out)
    assert len(pending.left_out) == LEFT_OUT_MAX_ENTRIES + 1
    assert pending.left_out[-1] == {"path": "", "more": 5}
    assert pending.changes == []
    assert worktree_commit(repository=linked, worktree=worktree, message="x\n", pending=pending) is None


def test_a_nested_repository_is_left_out_as_one_entry(linked: Repository, repo: Path, worktree: Path) -> None:
    base = git(repo, "rev-parse", "main")
    make_repo(worktree / "fixtures" / "sample", {"f.txt": "nested\n"})
    (worktree / "a.txt").write_text("edited\n")

    pending = worktree_pending(repository=linked, worktree=worktree, written={"a.txt"})
    worktree_commit(repository=linked, worktree=worktree, message="Edit\n", pending=pending)

    assert committed(repo, base) == ["a.txt"]
    # One line for the folder; its repository's own git dir is not counted as files.
    assert pending.left_out == [{"path": "fixtures/", "files": 1}]
    assert git(repo, "ls-tree", "-r", "autocoder/task-1-run-1").count("160000") == 0  # no gitlink
