"""Who may use which folder under REPOS_ROOT.

A folder belongs to the user whose project cloned it or linked it first, or to whom an
operator granted it (RepositoryFolder). To anyone else it does not exist: linking it,
cloning from it, or linking a folder inside it or around it gets the answer a missing
folder gets, and no answer names a server path. Clones go to a folder of each user's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from .git import GitError
from .models import Repository, RepositoryFolder

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project

# One answer for a folder that is missing, is not the top of a git working tree, lies
# outside the repositories folder or belongs to another user: which one it was is not
# the asker's business, and neither are the server's paths.
FOLDER_UNAVAILABLE = (
    "There is no git working tree at that path that you can use. Give the folder of a working tree "
    "(a clone with files) inside the server's repositories folder, e.g. myapp."
)
FOLDER_TAKEN = "This repository's folder belongs to another user's project. Link another repository."


def repos_root() -> Path:
    root = Path(settings.REPOS_ROOT).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _users_root() -> Path:
    """Where clones go, one folder per user."""
    return repos_root() / "users"


def user_clone_root(user: User) -> Path:
    return _users_root() / str(user.pk)


def resolve_under_root(raw: str, field_name: str, message: str = FOLDER_UNAVAILABLE) -> Path:
    """The real path (symlinks followed) of ``raw``, refused unless under REPOS_ROOT."""
    root = repos_root()
    given = Path(raw.strip()).expanduser()
    candidate = given if given.is_absolute() else root / given
    resolved = Path(os.path.realpath(candidate))
    if root not in resolved.parents:
        raise ValidationError({field_name: [message]})
    return resolved


def _overlapping(path: Path) -> Q:
    """Folders that are ``path``, inside it, or around it."""
    ancestors = [str(parent) for parent in path.parents]
    return Q(path=str(path)) | Q(path__startswith=f"{path}/") | Q(path__in=ancestors)


def folder_available_to(*, user: User, path: Path) -> bool:
    """Whether ``user`` may use the folder at ``path`` (resolved): no other user's
    folder is it, inside it or around it, and it is not in another user's clone area
    nor around the worktrees."""
    users_root = _users_root()
    if path == users_root or (users_root in path.parents and path.relative_to(users_root).parts[0] != str(user.pk)):
        return False
    worktrees = Path(settings.WORKTREES_ROOT).resolve()
    if path == worktrees or worktrees in path.parents or path in worktrees.parents:
        return False
    others = RepositoryFolder.objects.filter(_overlapping(path)).exclude(owner=user).exclude(shared_with=user)
    return not others.exists()


def folder_inside_a_working_tree(path: Path) -> bool:
    """Whether ``path`` (resolved) lies inside a git working tree under REPOS_ROOT: a
    folder whose files a run can write (its merge lands there), which therefore never
    serves as a push target or clone source — git would read its config and hooks."""
    root = repos_root()
    for parent in path.parents:
        if parent == root or root not in parent.parents:
            return False
        if os.path.lexists(parent / ".git"):
            return True
    return False


def folder_claim(*, project: Project, path: Path, field_name: str) -> None:
    """Record that ``path`` belongs to the project's owner, unless it already does or
    is shared with them. Inside the caller's transaction."""
    user = project.owner
    try:
        with transaction.atomic():
            folder, created = RepositoryFolder.objects.get_or_create(
                path=str(path), defaults={"owner": user, "project": project}
            )
    except IntegrityError:  # claimed by a concurrent request a moment ago
        folder, created = RepositoryFolder.objects.get(path=str(path)), False
    if not created and folder.owner_id != user.pk and not folder.shared_with.filter(pk=user.pk).exists():
        raise ValidationError({field_name: [FOLDER_UNAVAILABLE]})


def repository_folder_check(*, repository: Repository) -> None:
    """Before git touches a linked folder for a run or a merge: it is still the project
    owner's to use (links made before folders had owners may not be)."""
    if not folder_available_to(user=repository.project.owner, path=Path(repository.path)):
        raise GitError(FOLDER_TAKEN)
