"""Reads about linked repositories: the link (yours only), the repository's state on
disk, and the disk its runs' worktrees use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from core.selectors import one_or_not_found

from .git import GitError, folder_read_access, git_output, git_succeeds, repository_read_access, run_git
from .models import Repository, RepositoryStatus
from .services.worktrees import path_disk_usage
from .suggestions import Suggestion, repository_suggest

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project

NOT_LINKED = "This project has no linked repository."
FOLDER_GONE = "The folder {path} is not there any more (moved or deleted?). Link it again."


def repository_get_for_user(*, user: User, project_id: object) -> Repository:
    """The repository of a project the user owns; NotFound otherwise (not yours and
    not there look the same)."""
    repositories = Repository.objects.select_related("project").filter(project__owner=user)
    return one_or_not_found(repositories, project_id, NOT_LINKED, field="project_id")


def repository_for_project(*, project: Project) -> Repository | None:
    return Repository.objects.filter(project=project).first()


@dataclass
class RepositoryState:
    branch: str = ""
    head_commit: str = ""
    head_subject: str = ""
    head_author: str = ""
    head_date: str = ""
    clean: bool = True
    changed_files: int = 0
    base_branch_exists: bool = False
    branches: list[str] = field(default_factory=list)
    error: str = ""


def repository_state(*, repository: Repository) -> RepositoryState:
    """What the repository's checkout looks like now. Never raises: a vanished folder
    or a git failure is reported in ``error``."""
    if repository.status != RepositoryStatus.READY:
        return RepositoryState(error=repository.error)
    path = Path(repository.path)
    if not path.is_dir():
        return RepositoryState(error=FOLDER_GONE.format(path=repository.display_path))
    # Read-only, the checkout and its .git: a look changes nothing.
    looking = folder_read_access(path)
    try:
        branch = run_git(
            ["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=path, access=looking, check=False
        ).stdout.strip()
        head = git_output(["log", "-1", "--format=%H%x00%s%x00%an%x00%cI"], cwd=path, access=looking).split("\x00")
        status = git_output(["status", "--porcelain", "--ignore-submodules=dirty"], cwd=path, access=looking)
        branches = git_output(
            ["for-each-ref", "--format=%(refname:short)", "refs/heads/"], cwd=path, access=looking
        ).splitlines()
        base_exists = git_succeeds(
            ["rev-parse", "--verify", "--quiet", f"refs/heads/{repository.base_branch}"], cwd=path, access=looking
        )
    except GitError as exc:
        return RepositoryState(error=exc.message)
    changed = [line for line in status.splitlines() if line.strip()]
    return RepositoryState(
        branch=branch or "(detached)",
        head_commit=head[0] if head else "",
        head_subject=head[1] if len(head) > 1 else "",
        head_author=head[2] if len(head) > 2 else "",
        head_date=head[3] if len(head) > 3 else "",
        clean=not changed,
        changed_files=len(changed),
        base_branch_exists=base_exists,
        branches=sorted(branches),
    )


def repository_suggestion(*, repository: Repository) -> Suggestion | None:
    """A setup script and test command suggested by the checkout's files, for a ready
    repository whose folder is there; None otherwise. Reads a few small files: cheap
    enough to compute on every read."""
    if repository.status != RepositoryStatus.READY:
        return None
    path = Path(repository.path)
    if not path.is_dir():
        return None
    return repository_suggest(path=path)


def repository_worktrees_disk_usage(*, repository: Repository) -> int:
    """Bytes used by the repository's worktrees (the runs' working copies), as git
    lists them; a worktree whose folder is gone counts nothing."""
    main = Path(repository.path).resolve()
    try:
        listing = git_output(["worktree", "list", "--porcelain"], cwd=main, access=repository_read_access(main))
    except GitError:
        return 0
    # Only worktrees where runs keep theirs: git's records are files a confined git
    # wrote, and are not trusted to name any other folder of the server.
    root = Path(settings.WORKTREES_ROOT).resolve()
    paths = {Path(line.removeprefix("worktree ")) for line in listing.splitlines() if line.startswith("worktree ")}
    return sum(path_disk_usage(path) for path in paths if root in path.resolve().parents)
