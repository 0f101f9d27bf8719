"""Linking repositories and the git work of a run, on real repositories in tmp_path."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from repos import folders
from repos.clone import LOCAL_CLONE_FAILED
from repos.git import GitError
from repos.models import MergeStrategy, Repository, RepositoryStatus
from repos.selectors import FOLDER_GONE, repository_state
from repos.services.branches import (
    branch_changed_files,
    branch_delete,
    branch_diff,
    branch_format_patch,
    branch_merge,
    file_line_changes,
)
from repos.services.commits import worktree_commit
from repos.services.linking import (
    CLONE_SOURCE_UNAVAILABLE,
    UNKNOWN_BRANCH,
    repository_clone,
    repository_clone_execute,
    repository_link,
)
from repos.services.worktrees import worktree_create, worktree_remove

pytestmark = pytest.mark.django_db


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com"}
    env |= {"GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None, branch: str = "main") -> Path:
    path.mkdir(parents=True)
    for name, content in (files or {"a.txt": "one\ntwo\nthree\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content)
    git(path, "init", "--quiet", f"--initial-branch={branch}")
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "Initial")
    return path


@pytest.fixture
def root(tmp_path: Path, settings) -> Path:
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    (tmp_path / "repos").mkdir()
    return tmp_path / "repos"


@pytest.fixture
def repo(root: Path) -> Path:
    return make_repo(root / "app")


@pytest.fixture
def linked(project, repo: Path) -> Repository:
    return repository_link(project=project, path="app")


def field_errors(exc: pytest.ExceptionInfo[ValidationError]) -> dict[str, list[str]]:
    return exc.value.message_dict


# --- Linking ----------------------------------------------------------------------------


def test_link_by_name_under_the_root_defaults_to_the_current_branch(project, repo: Path) -> None:
    repository = repository_link(project=project, path="app", test_command=" pytest -q ")
    assert repository.path == str(repo.resolve())
    assert repository.base_branch == "main"
    assert repository.test_command == "pytest -q"
    assert repository.status == RepositoryStatus.READY
    state = repository_state(repository=repository)
    assert state.branch == "main" and state.clean and state.head_subject == "Initial"


@pytest.mark.parametrize("path", ["/etc", "../outside", "/tmp"])
def test_paths_outside_the_root_are_refused(project, root: Path, path: str) -> None:
    (root.parent / "outside").mkdir()
    with pytest.raises(ValidationError) as refused:
        repository_link(project=project, path=path)
    assert "inside the server's repositories folder" in field_errors(refused)["path"][0]
    assert not Repository.objects.exists()


def test_a_symlink_escaping_the_root_is_refused(project, root: Path, tmp_path: Path) -> None:
    make_repo(tmp_path / "elsewhere")
    (root / "sneaky").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValidationError) as refused:
        repository_link(project=project, path="sneaky")
    assert "path" in field_errors(refused)


def test_not_a_repository_unknown_branch_and_subfolder_are_refused(project, root: Path, repo: Path) -> None:
    (root / "plain").mkdir()
    (repo / "sub").mkdir()
    with pytest.raises(ValidationError) as plain:
        repository_link(project=project, path="plain")
    assert field_errors(plain)["path"] == [folders.FOLDER_UNAVAILABLE]
    with pytest.raises(ValidationError) as sub:
        repository_link(project=project, path="app/sub")
    assert "path" in field_errors(sub)
    with pytest.raises(ValidationError) as branch:
        repository_link(project=project, path="app", base_branch="nope")
    assert field_errors(branch)["base_branch"] == [UNKNOWN_BRANCH.format(branch="nope")]


def test_clone_from_a_local_repository_under_the_root(project, repo: Path) -> None:
    repository = repository_clone(project=project, url=str(repo))
    assert repository.status == RepositoryStatus.CLONING
    repository_clone_execute(repository_id=repository.pk)
    repository.refresh_from_db()
    assert repository.status == RepositoryStatus.READY, repository.error
    assert repository.base_branch == "main"
    assert (Path(repository.path) / "a.txt").read_text() == "one\ntwo\nthree\n"
    # Running the task again (a redelivery) changes nothing.
    assert repository_clone_execute(repository_id=repository.pk) is None


@pytest.mark.parametrize(
    "url", ["ext::sh -c touch% /tmp/pwned", "/etc", "file:///etc", "--upload-pack=evil", "ftp://host/x.git", ""]
)
def test_unsafe_clone_sources_are_refused(project, root: Path, url: str) -> None:
    with pytest.raises(ValidationError) as refused:
        repository_clone(project=project, url=url)
    assert "url" in field_errors(refused)
    assert not Repository.objects.exists()


def test_a_failed_clone_says_why_without_server_paths(project, root: Path) -> None:
    (root / "plain").mkdir()
    repository = repository_clone(project=project, url=str(root / "plain"))
    repository_clone_execute(repository_id=repository.pk)
    repository.refresh_from_db()
    assert repository.status == RepositoryStatus.FAILED
    assert repository.error == LOCAL_CLONE_FAILED and str(root) not in repository.error
    assert not Path(repository.path).exists()


def test_a_missing_clone_source_is_refused_like_anothers(project, root: Path) -> None:
    with pytest.raises(ValidationError) as refused:
        repository_clone(project=project, url=str(root / "missing"))
    assert field_errors(refused)["url"] == [CLONE_SOURCE_UNAVAILABLE]


# --- A run's worktree -----------------------------------------------------------------------


def test_worktree_apply_commit_and_diff(linked: Repository, repo: Path, tmp_path: Path) -> None:
    worktree = tmp_path / "worktrees" / "run-1"
    base = worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    assert base == git(repo, "rev-parse", "main")
    # Idempotent: a redone phase finds the same worktree.
    assert worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree) == base

    # The Coder's edits, as its tools leave them in the worktree.
    (worktree / "a.txt").write_text("one\nTWO\nthree\n")
    (worktree / "new").mkdir()
    (worktree / "new" / "b.txt").write_text("bee\n")
    head = worktree_commit(repository=linked, worktree=worktree, message="Change a, add b\n", written={"new/b.txt"})
    assert head and worktree_commit(repository=linked, worktree=worktree, message="nothing") is None

    files = branch_changed_files(repository=linked, base=base, head="autocoder/task-1-run-1")
    assert [(f["file_path"], f["action"]) for f in files] == [("a.txt", "modify"), ("new/b.txt", "create")]
    assert files[0]["old_content"] == "one\ntwo\nthree\n" and files[0]["new_content"] == "one\nTWO\nthree\n"
    # The seed's shape, {file_path, content, action}, is a view of the same diff.
    assert [(f["file_path"], f["content"], f["action"]) for f in files] == [
        ("a.txt", "one\nTWO\nthree\n", "modify"),
        ("new/b.txt", files[1]["new_content"], "create"),
    ]
    diff = branch_diff(repository=linked, base=base, head="autocoder/task-1-run-1")
    assert "-two\n+TWO\n" in diff and "+++ b/new/b.txt" in diff
    assert git(repo, "status", "--porcelain") == ""  # the user's checkout is untouched


def test_which_lines_of_a_file_two_commits_apart_changed(linked: Repository, repo: Path) -> None:
    lines = "".join(f"{n}\n" for n in range(1, 11))
    (repo / "ten.txt").write_text(lines)
    (repo / "keep.txt").write_text("kept\n")
    (repo / "blob.bin").write_bytes(b"one\x00\n")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "Ten")
    old = git(repo, "rev-parse", "HEAD")
    # Line 3 edited, a line inserted between 6 and 7, line 9 removed; keep.txt moved away.
    edited = lines.replace("3\n", "three\n").replace("6\n", "6\nsix and a half\n").replace("9\n", "")
    (repo / "ten.txt").write_text(edited)
    git(repo, "mv", "keep.txt", "kept.txt")
    (repo / "blob.bin").write_bytes(b"two\x00\n")
    git(repo, "commit", "--quiet", "-am", "Edit")
    new = git(repo, "rev-parse", "HEAD")

    changes = file_line_changes(repository=linked, old=old, new=new, path="ten.txt")
    assert changes.touches(3, 3) and changes.touches(1, 3) and changes.touches(9, 10)
    assert changes.touches(6, 7)  # a line inserted between two commented ones
    assert not changes.touches(1, 2) and not changes.touches(4, 5) and not changes.touches(10, 10)
    assert not changes.touches(6, 6) and not changes.touches(7, 8)  # inserted beside them, not among them
    assert file_line_changes(repository=linked, old=old, new=new, path="keep.txt").touches(1, 1)  # moved away
    assert file_line_changes(repository=linked, old=old, new=new, path="blob.bin").whole_file  # no lines to say
    assert not file_line_changes(repository=linked, old=old, new=old, path="ten.txt").touches(1, 10)
    # A name with pathspec magic is a file name, nothing more.
    assert file_line_changes(repository=linked, old=old, new=new, path="*.txt").hunks == ()


def _branch_with_change(linked: Repository, tmp_path: Path, content: str, name: str = "autocoder/t") -> str:
    worktree = tmp_path / "worktrees" / name.replace("/", "-")
    worktree_create(repository=linked, branch=name, path=worktree)
    (worktree / "a.txt").write_text(content)
    worktree_commit(repository=linked, worktree=worktree, message="Ours\n")
    return name


def test_merge_commit_into_a_clean_checkout_updates_its_files(linked: Repository, repo: Path, tmp_path: Path) -> None:
    branch = _branch_with_change(linked, tmp_path, "one\nTWO\nthree\n")
    (repo / "c.txt").write_text("theirs\n")
    git(repo, "add", "c.txt")
    git(repo, "commit", "-qm", "Theirs, elsewhere")

    result = branch_merge(repository=linked, branch=branch)

    assert result.merged and result.conflicts == []
    assert git(repo, "rev-parse", "main") == result.commit
    assert git(repo, "log", "-1", "--format=%P", "main").count(" ") == 1  # two parents
    assert (repo / "a.txt").read_text() == "one\nTWO\nthree\n"
    assert git(repo, "status", "--porcelain") == ""
    # Merged branches may go; approving again is harmless.
    assert branch_merge(repository=linked, branch=branch).merged
    worktree_remove(repository=linked, path=tmp_path / "worktrees" / "autocoder-t")
    branch_delete(repository=linked, branch=branch)
    assert not git(repo, "branch", "--list", branch)


def test_fast_forward_only(linked: Repository, repo: Path, tmp_path: Path) -> None:
    linked.merge_strategy = MergeStrategy.FF_ONLY
    branch = _branch_with_change(linked, tmp_path, "one\nTWO\nthree\n")
    tip = git(repo, "rev-parse", branch)
    result = branch_merge(repository=linked, branch=branch)
    assert result.merged and git(repo, "rev-parse", "main") == tip


def test_fast_forward_only_refuses_when_the_base_moved(linked: Repository, repo: Path, tmp_path: Path) -> None:
    linked.merge_strategy = MergeStrategy.FF_ONLY
    branch = _branch_with_change(linked, tmp_path, "one\nTWO\nthree\n")
    (repo / "c.txt").write_text("theirs\n")
    git(repo, "add", "c.txt")
    git(repo, "commit", "-qm", "Theirs")
    before = git(repo, "rev-parse", "main")
    result = branch_merge(repository=linked, branch=branch)
    assert not result.merged and "fast-forward" in result.message
    assert git(repo, "rev-parse", "main") == before


def test_a_conflict_changes_nothing_and_lists_the_files(linked: Repository, repo: Path, tmp_path: Path) -> None:
    branch = _branch_with_change(linked, tmp_path, "one\nOURS\nthree\n")
    (repo / "a.txt").write_text("one\nTHEIRS\nthree\n")
    git(repo, "commit", "-qam", "Theirs")
    before, tip = git(repo, "rev-parse", "main"), git(repo, "rev-parse", branch)

    result = branch_merge(repository=linked, branch=branch)

    assert not result.merged and result.conflicts == ["a.txt"]
    assert git(repo, "rev-parse", "main") == before and git(repo, "rev-parse", branch) == tip
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git" / "MERGE_HEAD").exists()


def test_a_dirty_checkout_refuses_the_merge_and_keeps_the_users_work(
    linked: Repository, repo: Path, tmp_path: Path
) -> None:
    branch = _branch_with_change(linked, tmp_path, "one\nTWO\nthree\n")
    (repo / "a.txt").write_text("my unsaved work\n")
    before = git(repo, "rev-parse", "main")
    result = branch_merge(repository=linked, branch=branch)
    assert not result.merged and "uncommitted changes" in result.message
    assert (repo / "a.txt").read_text() == "my unsaved work\n"
    assert git(repo, "rev-parse", "main") == before


def test_the_patch_applies_with_git_am_on_a_fresh_clone(linked: Repository, repo: Path, tmp_path: Path) -> None:
    branch = _branch_with_change(linked, tmp_path, "one\nTWO\nthree\n")
    patch = branch_format_patch(repository=linked, base="main", branch=branch)
    assert patch.startswith("From ") and "Subject: [PATCH] Ours" in patch
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", str(repo), str(clone))
    subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@example.com", "am", "--quiet"],
        cwd=clone, input=patch, text=True, check=True, capture_output=True,
    )  # fmt: skip
    assert (clone / "a.txt").read_text() == "one\nTWO\nthree\n"


def test_an_unmerged_branch_is_deleted_only_when_forced(linked: Repository, repo: Path, tmp_path: Path) -> None:
    branch = _branch_with_change(linked, tmp_path, "one\nTWO\nthree\n")
    worktree_remove(repository=linked, path=tmp_path / "worktrees" / branch.replace("/", "-"))
    with pytest.raises(GitError):
        branch_delete(repository=linked, branch=branch)
    assert git(repo, "branch", "--list", branch)
    branch_delete(repository=linked, branch=branch, force=True)
    assert not git(repo, "branch", "--list", branch)


def test_state_of_a_dirty_and_of_a_vanished_repository(linked: Repository, repo: Path) -> None:
    (repo / "a.txt").write_text("dirty\n")
    state = repository_state(repository=linked)
    assert not state.clean and state.changed_files == 1 and state.base_branch_exists
    linked.path = str(repo.parent / "gone")
    assert repository_state(repository=linked).error == FOLDER_GONE.format(path="gone")


def test_worktrees_disk_usage_counts_the_repositorys_worktrees_only(
    linked: Repository, repo: Path, tmp_path: Path
) -> None:
    from repos.selectors import repository_worktrees_disk_usage

    assert repository_worktrees_disk_usage(repository=linked) == 0  # the main tree does not count
    worktree = tmp_path / "worktrees" / "task-1-run-1"
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    used = repository_worktrees_disk_usage(repository=linked)
    assert used > 0
    (worktree / "big.bin").write_bytes(b"x" * 10_000)
    assert repository_worktrees_disk_usage(repository=linked) == used + 10_000
    git(repo, "worktree", "remove", "--force", str(worktree))
    assert repository_worktrees_disk_usage(repository=linked) == 0


def test_worktrees_of_one_repository_are_added_and_removed_one_process_at_a_time(
    tmp_path: Path, settings, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Eight runs starting at once, worktrees being removed meanwhile: every add works
    (a prune during another add used to delete that add's admin folder)."""
    import threading

    from repos.services import worktrees
    from repos.services.worktrees import worktrees_locked

    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    repo = make_repo(tmp_path / "repos" / "app")
    repository = Repository(path=str(repo), base_branch="main")
    # Threads have database connections of their own, which do not see this test's rows:
    # the folder's ownership is checked elsewhere (test_ownership.py).
    monkeypatch.setattr(worktrees, "repository_folder_check", lambda **_: None)
    errors: list[BaseException] = []

    def start(n: int) -> None:
        try:
            path = tmp_path / "worktrees" / f"run-{n}"
            worktree_create(repository=repository, branch=f"autocoder/run-{n}", path=path)
            if n % 2:
                worktree_remove(repository=repository, path=path)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=start, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    listed = git(repo, "worktree", "list")
    assert all(f"run-{n}" in listed for n in range(0, 8, 2))
    assert not any(f"run-{n} " in listed for n in range(1, 8, 2))

    # While the lock is held, another add waits.
    held = threading.Event()
    with worktrees_locked(repo):
        waiter = threading.Thread(
            target=lambda: (
                worktree_create(repository=repository, branch="autocoder/late", path=tmp_path / "worktrees" / "late"),
                held.set(),
            )
        )
        waiter.start()
        waiter.join(1.0)
        assert not held.is_set() and not (tmp_path / "worktrees" / "late").exists()
    waiter.join(60)
    assert held.is_set() and (tmp_path / "worktrees" / "late" / "a.txt").exists()
