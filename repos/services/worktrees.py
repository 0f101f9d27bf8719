"""A run's worktree: made on its own branch from the base branch (its submodules and LFS
files in), or detached at a commit for an environment's setup; removed with git's record
of it, one process at a time per repository.

Git is slow I/O: nothing here runs git inside a database transaction.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from .. import submodules
from ..folders import repository_folder_check
from ..git import git_output, git_succeeds, repository_git_dir, repository_read_access, run_git, worktree_access
from ..models import Repository
from ..submodules import lfs_pull, submodules_checkout
from .linking import origin_of, submodule_url_check


@contextmanager
def worktrees_locked(repo: Path) -> Iterator[None]:
    """One process at a time adds, removes or prunes a repository's worktrees: a prune
    while another process's ``worktree add`` is half done deletes that worktree's
    admin folder ("could not open '.git/worktrees/<name>/locked'", seen with 50 runs
    started at once). The lock file lives under WORKTREES_ROOT (shared by the workers),
    never in the user's repository."""
    locks = Path(settings.WORKTREES_ROOT) / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:32]
    with open(locks / f"{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def worktree_create(*, repository: Repository, branch: str, path: Path) -> str:
    """A worktree at ``path`` on a new ``branch`` from the base branch, its submodules
    and LFS files in (:func:`_worktree_complete`); returns the commit the branch starts
    from. Idempotent: an existing worktree or branch of an earlier attempt is reused."""
    repository_folder_check(repository=repository)
    repo = Path(repository.path)
    with worktrees_locked(repo):
        base_commit = _worktree_add(repository, repo, branch, path)
    # Outside the lock: fetching submodules may take long, and other runs' worktrees wait
    # for it. An attempt that died before this point gets them now (checking out what is
    # already there changes nothing).
    _worktree_complete(repository, repo, path)
    return base_commit


def _worktree_add(repository: Repository, repo: Path, branch: str, path: Path) -> str:
    base = repository.base_branch
    reading = repository_read_access(repo)
    has_branch = git_succeeds(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=repo, access=reading)
    if path.exists() and has_branch:
        current = run_git(
            ["symbolic-ref", "--quiet", "--short", "HEAD"],
            cwd=path,
            access=worktree_access(repo, path),
            check=False,
        )
        if current.stdout.strip() == branch:
            return git_output(["merge-base", base, branch], cwd=repo, access=reading)
    # What an attempt that died half-way left: its files, and git's record of them.
    # (Not `git worktree prune`: confined to this repository and this worktree, it
    # would take every other run's worktree for gone.)
    shutil.rmtree(path, ignore_errors=True)
    _forget_worktree(repo, path)
    path.mkdir(parents=True)
    access = worktree_access(repo, path)
    if has_branch:
        run_git(["worktree", "add", "--quiet", "--force", str(path), branch], cwd=repo, access=access)
        return git_output(["merge-base", base, branch], cwd=repo, access=reading)
    base_commit = git_output(["rev-parse", "--verify", f"refs/heads/{base}^{{commit}}"], cwd=repo, access=reading)
    run_git(["worktree", "add", "--quiet", "-b", branch, str(path), base_commit], cwd=repo, access=access)
    return base_commit


def _worktree_complete(repository: Repository, repo: Path, path: Path) -> None:
    """What ``git worktree add`` does not bring: the submodules at their recorded
    commits, and the LFS files where git-lfs is installed (repos/submodules.py). What
    cannot be had is said on the repository's page; the worktree is made regardless."""
    has_submodules = (path / ".gitmodules").is_file()
    if not has_submodules and not submodules.git_lfs_installed():
        return  # the common case: nothing to look at
    origin = origin_of(repo, repository.origin_url)
    check = submodule_url_check(repository.project.owner)
    warnings = []
    if has_submodules:
        warnings += submodules_checkout(repo=repo, worktree=path, origin=origin, url_check=check)
    warnings += lfs_pull(repo=repo, worktree=path, origin=origin, url_check=check)
    if warnings:
        _link_warnings_add(repository, warnings)


def worktree_detached_create(*, repository: Repository, path: Path, commit: str) -> None:
    """A worktree at ``path`` at ``commit`` on no branch (where an environment's setup
    runs); removed with worktree_remove."""
    repository_folder_check(repository=repository)
    repo = Path(repository.path)
    with worktrees_locked(repo):
        shutil.rmtree(path, ignore_errors=True)
        _forget_worktree(repo, path)
        path.mkdir(parents=True)
        run_git(
            ["worktree", "add", "--quiet", "--detach", str(path), f"{commit}^{{commit}}"],
            cwd=repo,
            access=worktree_access(repo, path),
        )


def _forget_worktree(repo: Path, path: Path) -> None:
    """Remove git's record of the worktree at ``path`` (``.git/worktrees/<name>``), so
    that its branch can be checked out again and the name reused."""
    records = repository_git_dir(repo) / "worktrees"
    if not records.is_dir():
        return
    pointer = f"{path}/.git"
    for record in records.iterdir():
        gitdir = record / "gitdir"
        try:
            if record.is_dir() and not record.is_symlink() and gitdir.read_text().strip() == pointer:
                shutil.rmtree(record)
        except (OSError, UnicodeDecodeError):
            continue


def _link_warnings_add(repository: Repository, warnings: list[str]) -> None:
    """Add what a worktree found (a submodule left empty…) to what the repository's page
    says, once each."""
    current = list(Repository.objects.filter(pk=repository.pk).values_list("link_warnings", flat=True).first() or [])
    merged = [*current, *(warning for warning in dict.fromkeys(warnings) if warning not in current)][:20]
    if merged != current:
        Repository.objects.filter(pk=repository.pk).update(link_warnings=merged)
    repository.link_warnings = merged


def worktree_remove(*, repository: Repository, path: Path) -> None:
    """The worktree's files go, and git's record of it. No git runs for it: the files
    are deleted by the server (symlinks not followed), which needs no repository's
    config."""
    repo = Path(repository.path)
    if not repo.is_dir():
        shutil.rmtree(path, ignore_errors=True)
        return
    with worktrees_locked(repo):
        shutil.rmtree(path, ignore_errors=True)
        _forget_worktree(repo, path)


def path_disk_usage(path: Path) -> int:
    """Bytes used under ``path`` (symlinks not followed)."""
    total = 0
    for folder, _, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total
