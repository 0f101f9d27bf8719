"""Linking a repository to a project: a working tree already on the server, a clone
made in the background, or the project's own empty repository; and forgetting the link.
What git may clone from or push to (:func:`validate_git_url`) is decided here too.

Git is slow I/O: nothing here runs git inside a database transaction.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from core.jobs import enqueue_on_commit

from ..clone import clone_from, clone_host_check
from ..folders import (
    FOLDER_UNAVAILABLE,
    folder_available_to,
    folder_claim,
    folder_inside_a_working_tree,
    resolve_under_root,
    user_clone_root,
)
from ..git import GitAccess, GitError, folder_read_access, git_succeeds, repository_read_access, run_git
from ..models import MergeStrategy, Repository, RepositoryStatus, display_path
from ..submodules import link_warnings_find

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project


PATH_REQUIRED = "Give the repository's folder."
NO_COMMITS = "The repository has no commits yet; commit something first."
DETACHED_HEAD = "The repository is not on a branch; name the base branch."
UNKNOWN_BRANCH = "The repository has no branch named {branch}."
BAD_URL = "Give an https://, ssh://, git:// or user@host:path URL, or a local path inside the repositories folder."
CLONE_SOURCE_UNAVAILABLE = "There is no repository at that path that you can clone."


_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")
_NETWORK_SCHEMES = ("https://", "ssh://", "git://")
_REMOTE_HELPER = re.compile(r"^[A-Za-z0-9+._-]*::")


OWN_REPOSITORY_BRANCH = "main"
OWN_REPOSITORY_START = "Start: the project's own repository (AutoCoder)"
OWN_REPOSITORY_BROKEN = "The project's own repository ({path}) is not usable: {detail} Link a repository, then Retry."


def _validate_working_tree(path: Path, field_name: str) -> None:
    if not path.is_dir():
        raise ValidationError({field_name: [FOLDER_UNAVAILABLE]})
    # Read-only: a folder being linked is looked at, not changed (nor handed over).
    inside = run_git(
        ["rev-parse", "--is-bare-repository", "--show-toplevel"], cwd=path, access=folder_read_access(path), check=False
    )
    lines = inside.stdout.strip().splitlines()
    if inside.returncode != 0 or (lines and lines[0] == "true"):
        raise ValidationError({field_name: [FOLDER_UNAVAILABLE]})
    if len(lines) < 2 or Path(os.path.realpath(lines[1])) != path:
        raise ValidationError({field_name: [FOLDER_UNAVAILABLE]})
    if not git_succeeds(
        ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=path, access=folder_read_access(path)
    ):
        raise ValidationError({field_name: [NO_COMMITS]})


def resolve_base_branch(path: Path, base_branch: str) -> str:
    branch = base_branch.strip()
    if not branch:
        current = run_git(
            ["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=path, access=folder_read_access(path), check=False
        )
        if current.returncode != 0:
            raise ValidationError({"base_branch": [DETACHED_HEAD]})
        branch = current.stdout.strip()
    if not git_succeeds(
        ["check-ref-format", "--branch", branch], cwd=path, access=folder_read_access(path)
    ) or not git_succeeds(
        ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=path, access=folder_read_access(path)
    ):
        raise ValidationError({"base_branch": [UNKNOWN_BRANCH.format(branch=branch)]})
    return branch


def validate_repository_settings(merge_strategy: str, test_command: str) -> None:
    errors: dict[str, list[str]] = {}
    if merge_strategy not in MergeStrategy.values:
        errors["merge_strategy"] = [f"Choose one of: {', '.join(MergeStrategy.values)}."]
    if len(test_command) > 1000:
        errors["test_command"] = ["At most 1000 characters."]
    if "\x00" in test_command:
        errors["test_command"] = ["The command contains a NUL character."]
    if errors:
        raise ValidationError(errors)


def repository_link(
    *,
    project: Project,
    path: str,
    base_branch: str = "",
    merge_strategy: str = MergeStrategy.MERGE,
    test_command: str = "",
) -> Repository:
    """Link the git working tree at ``path`` (absolute, or relative to REPOS_ROOT) to
    the project, replacing an earlier link. The files stay where they are."""
    if not path or not path.strip():
        raise ValidationError({"path": [PATH_REQUIRED]})
    validate_repository_settings(merge_strategy, test_command)
    resolved = resolve_under_root(path, "path")
    # Ownership before anything git could tell about the folder.
    if not folder_available_to(user=project.owner, path=resolved):
        raise ValidationError({"path": [FOLDER_UNAVAILABLE]})
    _validate_working_tree(resolved, "path")
    branch = resolve_base_branch(resolved, base_branch)
    warnings = link_warnings_find(
        folder=resolved,
        access=folder_read_access(resolved),
        revision=f"refs/heads/{branch}",
        origin=origin_of(resolved),
        url_check=submodule_url_check(project.owner),
    )
    with transaction.atomic():
        folder_claim(project=project, path=resolved, field_name="path")
        repository, _ = Repository.objects.update_or_create(
            project=project,
            defaults={
                "path": str(resolved),
                "origin_url": "",
                "base_branch": branch,
                "merge_strategy": merge_strategy,
                "test_command": test_command.strip(),
                "status": RepositoryStatus.READY,
                "error": "",
                "link_warnings": warnings,
            },
        )
    return repository


def origin_of(repo: Path, origin_url: str = "") -> str:
    """What a relative submodule URL is read against, as git reads it: the repository's
    origin, or its own folder when it has none."""
    if origin_url:
        return origin_url
    configured = run_git(
        ["config", "--get", "remote.origin.url"], cwd=repo, access=repository_read_access(repo), check=False
    ).stdout.strip()
    return configured or str(repo)


def submodule_url_check(owner: User) -> Callable[[str], str]:
    """A submodule's URL passes the checks a clone URL passes, for the project's owner."""
    return lambda url: validate_git_url(url, owner, field="url")


def validate_git_url(url: str, user: User, *, field: str = "url", unavailable: str = CLONE_SOURCE_UNAVAILABLE) -> str:
    """A URL git may clone from or push to: a network one whose host is not internal,
    or a local repository under the root that is the user's to use."""
    url = url.strip()
    # "<transport>::<address>" runs git's remote helpers (ext:: runs any command).
    if not url or any(ch.isspace() for ch in url) or _REMOTE_HELPER.match(url) or url.startswith("-"):
        raise ValidationError({field: [BAD_URL]})
    if url.startswith(_NETWORK_SCHEMES) or _SCP_LIKE.match(url):
        try:
            clone_host_check(url)
        except ValidationError as error:
            raise ValidationError({field: error.message_dict["url"]}) from None
        return url
    local = url.removeprefix("file://")
    if local.startswith("/") or not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", local):
        # A local repository: only under the root, and only the user's to use.
        resolved = resolve_under_root(local, field, unavailable)
        if not resolved.is_dir() or not folder_available_to(user=user, path=resolved):
            raise ValidationError({field: [unavailable]})
        # A repository of its own (an operator's, or one AutoCoder made), never a
        # folder inside a working tree, where a run's merged files could have made it.
        if folder_inside_a_working_tree(resolved):
            raise ValidationError({field: [unavailable]})
        return str(resolved)
    raise ValidationError({field: [BAD_URL]})


def _clone_destination(project: Project, url: str) -> Path:
    """A new folder in the owner's own clone area, with a name nobody can guess."""
    name = slugify(Path(url.rstrip("/").split(":")[-1]).name.removesuffix(".git"))[:60] or "repository"
    area = user_clone_root(project.owner)
    destination = area / f"{name}-{secrets.token_hex(6)}"
    while destination.exists():
        destination = area / f"{name}-{secrets.token_hex(6)}"
    return destination


def repository_clone(
    *,
    project: Project,
    url: str,
    base_branch: str = "",
    merge_strategy: str = MergeStrategy.MERGE,
    test_command: str = "",
) -> Repository:
    """Record the link as cloning and clone in the background (repository_clone_run)."""
    source = validate_git_url(url, project.owner)
    validate_repository_settings(merge_strategy, test_command)
    destination = _clone_destination(project, source)
    with transaction.atomic():
        folder_claim(project=project, path=destination, field_name="url")
        repository, _ = Repository.objects.update_or_create(
            project=project,
            defaults={
                "path": str(destination),
                "origin_url": source,
                "base_branch": base_branch.strip(),
                "merge_strategy": merge_strategy,
                "test_command": test_command.strip(),
                "status": RepositoryStatus.CLONING,
                "error": "",
            },
        )
        enqueue_on_commit("repos.tasks.repository_clone_run", repository.pk)
    return repository


def repository_clone_execute(*, repository_id: int) -> Repository | None:
    """Clone a repository recorded as cloning; a no-op for any other (redelivery-safe).
    The clone is made beside its destination and moved in only when complete."""
    repository = Repository.objects.filter(pk=repository_id, status=RepositoryStatus.CLONING).first()
    if repository is None:
        return None
    destination = Path(repository.path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".clone-", dir=destination.parent))
    try:
        clone_from(repository.origin_url, staging / "tree")
        tree = staging / "tree"
        branch = resolve_base_branch(tree, repository.base_branch)
        if destination.exists():
            raise GitError(f"{destination} appeared while cloning; nothing was overwritten.")
        tree.rename(destination)
    except (GitError, ValidationError) as exc:
        message = exc.message if isinstance(exc, GitError) else " ".join(exc.messages)
        Repository.objects.filter(pk=repository.pk, status=RepositoryStatus.CLONING).update(
            status=RepositoryStatus.FAILED, error=message
        )
        repository.refresh_from_db()
        return repository
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    warnings = link_warnings_find(
        folder=destination,
        access=folder_read_access(destination),
        revision=f"refs/heads/{branch}",
        origin=repository.origin_url,
        url_check=submodule_url_check(repository.project.owner),
    )
    Repository.objects.filter(pk=repository.pk).update(
        status=RepositoryStatus.READY, base_branch=branch, error="", link_warnings=warnings
    )
    repository.refresh_from_db()
    return repository


def own_repository_path(project: Project) -> Path:
    """Where a project that links no repository keeps its own: in its owner's area."""
    return user_clone_root(project.owner) / f"project-{project.pk}"


def repository_ensure(*, project: Project) -> Repository:
    """The project's repository: the one it links or, when it links none, its own — an
    empty repository on ``main`` made the first time a run needs one, so that every run
    works in a worktree and its change is its branch. Safe to call concurrently: the
    repository is built beside its folder and moved in whole, and the link is one row."""
    linked = Repository.objects.filter(project=project).first()
    if linked is not None:
        return linked
    destination = own_repository_path(project)
    if not destination.exists():
        _create_empty_repository(destination)
    try:
        _validate_working_tree(destination, "path")
        branch = resolve_base_branch(destination, OWN_REPOSITORY_BRANCH)
    except ValidationError as exc:
        # Someone changed the folder by hand; a person has to look.
        raise GitError(
            OWN_REPOSITORY_BROKEN.format(path=display_path(str(destination)), detail=" ".join(exc.messages))
        ) from None
    with transaction.atomic():
        folder_claim(project=project, path=destination, field_name="path")
        repository, _ = Repository.objects.get_or_create(
            project=project,
            defaults={"path": str(destination), "base_branch": branch, "status": RepositoryStatus.READY},
        )
    return repository


def _create_empty_repository(destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".new-", dir=destination.parent))
    try:
        tree = staging / "tree"
        tree.mkdir()
        making = GitAccess(writable=(staging,))
        run_git(["init", "--quiet", f"--initial-branch={OWN_REPOSITORY_BRANCH}"], cwd=tree, access=making)
        # A first commit for runs to branch from; the runs' branches hold the changes.
        run_git(
            ["commit", "--quiet", "--allow-empty", "--no-verify", "-m", OWN_REPOSITORY_START], cwd=tree, access=making
        )
        try:
            tree.rename(destination)
        except OSError:
            if not destination.exists():
                raise
            # A concurrent run made it first: theirs is as good as ours.
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def repository_unlink(*, repository: Repository) -> None:
    """Forget the link; the repository's files and branches stay on disk."""
    repository.delete()
