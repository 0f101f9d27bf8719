"""Linked repositories: link or clone, and the git work of a run — its worktree and
branch, committing what the Coder left there, diffs, merge, patch, clean-up.

Git is slow I/O: nothing here runs git inside a database transaction.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from core.crypto import encrypt_secret
from core.jobs import enqueue_on_commit
from core.sandbox_images import ImageReferenceInvalid, parse_image_reference

from . import submodules
from .clone import CloneTarget, PushError, address_allowed, clone_from, clone_host_check, push_to, resolve
from .folders import (
    FOLDER_UNAVAILABLE,
    folder_available_to,
    folder_claim,
    folder_inside_a_working_tree,
    repos_root,
    repository_folder_check,
    resolve_under_root,
    user_clone_root,
)
from .forges import ForgeError, ForgeKind, forge_host_check
from .git import (
    GitAccess,
    GitError,
    folder_read_access,
    git_blob,
    git_output,
    git_succeeds,
    repository_git_dir,
    repository_read_access,
    repository_write_access,
    run_git,
    worktree_access,
)
from .models import MergeStrategy, Repository, RepositoryStatus, display_path
from .submodules import lfs_pull, link_warnings_find, submodules_checkout

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project


PATH_REQUIRED = "Give the repository's folder."
NO_COMMITS = "The repository has no commits yet; commit something first."
DETACHED_HEAD = "The repository is not on a branch; name the base branch."
UNKNOWN_BRANCH = "The repository has no branch named {branch}."
BAD_URL = "Give an https://, ssh://, git:// or user@host:path URL, or a local path inside the repositories folder."
CLONE_SOURCE_UNAVAILABLE = "There is no repository at that path that you can clone."
MERGE_DIRTY = "the repository's checkout of {base} has uncommitted changes; commit or stash them first."
MERGE_CONFLICTS = "merging changes the same lines as {base} since the branch started."
MERGE_NOT_FAST_FORWARD = "{base} moved on since the branch started, and the project merges by fast-forward only."
MERGE_RACED = "{base} moved while merging; try again."
BRANCH_NOT_MERGED = "The branch {branch} is not merged; discard it explicitly to delete it."

_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")
_NETWORK_SCHEMES = ("https://", "ssh://", "git://")
_REMOTE_HELPER = re.compile(r"^[A-Za-z0-9+._-]*::")
MAX_DIFF_FILE_BYTES = 1_000_000
GITLINK_MODE = "160000"
OWN_REPOSITORY_BRANCH = "main"
OWN_REPOSITORY_START = "Start: the project's own repository (AutoCoder)"
OWN_REPOSITORY_BROKEN = "The project's own repository ({path}) is not usable: {detail} Link a repository, then Retry."


# --- Linking ---------------------------------------------------------------------------


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


def _resolve_base_branch(path: Path, base_branch: str) -> str:
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


def _validate_settings(merge_strategy: str, test_command: str) -> None:
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
    _validate_settings(merge_strategy, test_command)
    resolved = resolve_under_root(path, "path")
    # Ownership before anything git could tell about the folder.
    if not folder_available_to(user=project.owner, path=resolved):
        raise ValidationError({"path": [FOLDER_UNAVAILABLE]})
    _validate_working_tree(resolved, "path")
    branch = _resolve_base_branch(resolved, base_branch)
    warnings = link_warnings_find(
        folder=resolved,
        access=folder_read_access(resolved),
        revision=f"refs/heads/{branch}",
        origin=_origin_of(resolved),
        url_check=_submodule_url_check(project.owner),
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


def _origin_of(repo: Path, origin_url: str = "") -> str:
    """What a relative submodule URL is read against, as git reads it: the repository's
    origin, or its own folder when it has none."""
    if origin_url:
        return origin_url
    configured = run_git(
        ["config", "--get", "remote.origin.url"], cwd=repo, access=repository_read_access(repo), check=False
    ).stdout.strip()
    return configured or str(repo)


def _submodule_url_check(owner: User) -> Callable[[str], str]:
    """A submodule's URL passes the checks a clone URL passes, for the project's owner."""
    return lambda url: _validate_git_url(url, owner, field="url")


def _link_warnings_add(repository: Repository, warnings: list[str]) -> None:
    """Add what a worktree found (a submodule left empty…) to what the repository's page
    says, once each."""
    current = list(Repository.objects.filter(pk=repository.pk).values_list("link_warnings", flat=True).first() or [])
    merged = [*current, *(warning for warning in dict.fromkeys(warnings) if warning not in current)][:20]
    if merged != current:
        Repository.objects.filter(pk=repository.pk).update(link_warnings=merged)
    repository.link_warnings = merged


def _validate_git_url(url: str, user: User, *, field: str = "url", unavailable: str = CLONE_SOURCE_UNAVAILABLE) -> str:
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
    source = _validate_git_url(url, project.owner)
    _validate_settings(merge_strategy, test_command)
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
        branch = _resolve_base_branch(tree, repository.base_branch)
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
        url_check=_submodule_url_check(repository.project.owner),
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
        branch = _resolve_base_branch(destination, OWN_REPOSITORY_BRANCH)
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


BASE_IMAGE_HOST_NOT_ALLOWED = (
    "The image's registry is on a private, loopback, link-local or otherwise internal address, which the server "
    "does not connect to (an operator can allow networks with CLONE_ALLOWED_NETWORKS)."
)
BASE_IMAGE_LAYOUT_UNAVAILABLE = "There is no OCI layout at that path that you can use."


def _validate_base_image(base_image: str, *, user: User) -> str:
    """A base image reference as stored: well formed (core/sandbox_images.py), a local
    layout only in a folder the project's owner may use, a registry only on an address
    the server may connect to (as for clones; the pull itself is not pinned)."""
    value = base_image.strip()
    if not value:
        return ""
    try:
        source = parse_image_reference(value)
    except ImageReferenceInvalid as error:
        raise ValidationError({"base_image": [error.message]}) from None
    if source.layout is not None:
        if repos_root() in source.layout.parents and not folder_available_to(user=user, path=source.layout):
            raise ValidationError({"base_image": [BASE_IMAGE_LAYOUT_UNAVAILABLE]})
        return value
    host, port = source.registry_host
    try:
        addresses = resolve(CloneTarget("https", host, port))
    except (OSError, UnicodeError):
        return value  # not resolvable now: the pull will say so
    if not all(address_allowed(address) for address in addresses):
        raise ValidationError({"base_image": [BASE_IMAGE_HOST_NOT_ALLOWED]})
    return value


def repository_update(
    *,
    repository: Repository,
    base_branch: str | None = None,
    merge_strategy: str | None = None,
    test_command: str | None = None,
    base_image: str | None = None,
) -> Repository:
    strategy = repository.merge_strategy if merge_strategy is None else merge_strategy
    command = repository.test_command if test_command is None else test_command
    _validate_settings(strategy, command)
    fields: dict[str, Any] = {"merge_strategy": strategy, "test_command": command.strip()}
    if base_image is not None and base_image.strip() != repository.base_image:
        fields["base_image"] = _validate_base_image(base_image, user=repository.project.owner)
    if base_branch is not None and base_branch.strip() != repository.base_branch:
        if repository.status != RepositoryStatus.READY:
            raise ValidationError({"base_branch": ["Wait until the repository is ready."]})
        fields["base_branch"] = _resolve_base_branch(Path(repository.path), base_branch)
    for name, value in fields.items():
        setattr(repository, name, value)
    repository.save(update_fields=[*fields, "updated_at"])
    return repository


# --- Pull requests: the push remote and the forge ---------------------------------------------

FORGE_FIELDS_REQUIRED = "Give this too, to open pull requests on the forge."
FORGE_BAD_API_URL = "Give the forge's API base URL: https://api.github.com, https://gitlab.example.com/api/v4, …"
FORGE_BAD_REPOSITORY = "Give the repository as owner/name (GitLab: group/subgroup/project)."
FORGE_BAD_TOKEN = "A token is one word of at most 500 characters."
PUSH_TARGET_UNAVAILABLE = "There is no repository at that path that you can push to."
NO_PUSH_TARGET = "The repository has no remote to push to: set one under Pull requests on its page."
FORGE_API_DEFAULTS: dict[str, str] = {
    ForgeKind.GITHUB: "https://api.github.com",
    ForgeKind.GITLAB: "https://gitlab.com/api/v4",
}
_FORGE_REPOSITORY = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)+$")


def _validate_forge_api_url(url: str) -> str:
    url = url.strip().rstrip("/")
    try:
        # ValueError: not a URL (a bracket left open, a port past 65535 …): as bad as any.
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValidationError({"forge_api_url": [FORGE_BAD_API_URL]}) from None
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password or port == 0:
        raise ValidationError({"forge_api_url": [FORGE_BAD_API_URL]})
    try:
        forge_host_check(url)
    except ForgeError as error:
        # A host that does not resolve now is left to the request, which checks again.
        if not error.retryable:
            raise ValidationError({"forge_api_url": [error.message]}) from None
    return url


def repository_set_forge(
    *,
    repository: Repository,
    user: User,
    push_url: str = "",
    forge_kind: str = "",
    forge_api_url: str = "",
    forge_repository: str = "",
    token: str | None = None,
) -> Repository:
    """Where run branches are pushed and which forge opens their pull requests.
    ``token``: None keeps the saved one, "" removes it. A webhook secret is made the
    first time a forge is set."""
    errors: dict[str, list[str]] = {}
    fields: dict[str, Any] = {"push_url": "", "forge_kind": forge_kind, "forge_api_url": "", "forge_repository": ""}
    if push_url.strip():
        try:
            fields["push_url"] = _validate_git_url(
                push_url, user, field="push_url", unavailable=PUSH_TARGET_UNAVAILABLE
            )
        except ValidationError as error:
            errors.update(error.message_dict)
    if forge_kind and forge_kind not in ForgeKind.values:
        errors["forge_kind"] = [f"Choose one of: {', '.join(ForgeKind.values)}."]
    elif forge_kind:
        api_url = forge_api_url.strip() or FORGE_API_DEFAULTS.get(forge_kind, "")
        if not api_url:
            errors["forge_api_url"] = [FORGE_FIELDS_REQUIRED]
        else:
            try:
                fields["forge_api_url"] = _validate_forge_api_url(api_url)
            except ValidationError as error:
                errors.update(error.message_dict)
        name = forge_repository.strip().strip("/")
        if not name:
            errors["forge_repository"] = [FORGE_FIELDS_REQUIRED]
        elif not _FORGE_REPOSITORY.match(name) or len(name) > 255:
            errors["forge_repository"] = [FORGE_BAD_REPOSITORY]
        fields["forge_repository"] = name
        if not fields["push_url"] and not repository.origin_url:
            errors.setdefault("push_url", [FORGE_FIELDS_REQUIRED])
    if token is not None:
        token = token.strip()
        if len(token) > 500 or any(ch.isspace() for ch in token):
            errors["token"] = [FORGE_BAD_TOKEN]
        fields["forge_token_encrypted"] = encrypt_secret(token)
    if forge_kind and not (token or (token is None and repository.forge_token_encrypted)):
        errors.setdefault("token", [FORGE_FIELDS_REQUIRED])
    if errors:
        raise ValidationError(errors)
    if forge_kind and not repository.forge_webhook_secret_encrypted:
        fields["forge_webhook_secret_encrypted"] = encrypt_secret(secrets.token_urlsafe(32))
    for name, value in fields.items():
        setattr(repository, name, value)
    repository.save(update_fields=[*fields, "updated_at"])
    return repository


def branch_push(*, repository: Repository, user: User, branch: str) -> str:
    """Push ``branch`` to the repository's push target; returns the target. A local
    target must still be a folder ``user`` may use (sharing can be withdrawn)."""
    target = repository.push_target
    if not target:
        raise PushError(NO_PUSH_TARGET)
    if target.startswith("/"):
        try:
            _validate_git_url(target, user, field="push_url", unavailable=PUSH_TARGET_UNAVAILABLE)
        except ValidationError:
            raise PushError(PUSH_TARGET_UNAVAILABLE) from None
    push_to(Path(repository.path), target, branch)
    return target


def repository_unlink(*, repository: Repository) -> None:
    """Forget the link; the repository's files and branches stay on disk."""
    repository.delete()


# --- A run's worktree and branch ---------------------------------------------------------


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
    origin = _origin_of(repo, repository.origin_url)
    check = _submodule_url_check(repository.project.owner)
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


def base_branch_head(*, repository: Repository) -> str:
    """The commit the base branch is at now."""
    repo = Path(repository.path)
    return git_output(
        ["rev-parse", "--verify", f"refs/heads/{repository.base_branch}^{{commit}}"],
        cwd=repo,
        access=repository_read_access(repo),
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


# What a commit leaves out is listed, but only so far: a test command can make any number
# of files. Folders are one entry each (git's own listing collapses new folders).
LEFT_OUT_MAX_ENTRIES = 100
LEFT_OUT_MAX_COUNTED_FILES = 20_000


@dataclass(frozen=True)
class PendingChanges:
    """What a worktree holds beyond its last commit, split by the commit rule: the
    paths to commit (``changes``: each ``{action, file_path}``) and the new paths left
    out (``left_out``: each ``{path}``, a folder ``{path: "dir/", files: n}``, with
    ``repository: true`` for a nested repository)."""

    changes: list[dict[str, str]]
    left_out: list[dict[str, Any]]


def _literal(paths: list[str]) -> str:
    """A NUL-separated pathspec file (``--pathspec-file-nul``): each path literally,
    whatever characters it holds (no globbing, no magic of its own)."""
    return "".join(f":(literal){path}\x00" for path in paths)


def _status_action(status: str) -> str:
    return "delete" if "D" in status else "modify"


def _count_files(folder: Path) -> tuple[int, bool]:
    """The files under ``folder`` (symlinks not followed), up to a bound; and whether
    the bound cut the count short."""
    count = 0
    for _, folders, files in os.walk(folder, followlinks=False):
        # A nested repository's own git dir is not its files.
        folders[:] = [name for name in folders if name != ".git"]
        count += len(files)
        if count >= LEFT_OUT_MAX_COUNTED_FILES:
            return LEFT_OUT_MAX_COUNTED_FILES, True
    return count, False


def _left_out_folder(worktree: Path, relative: str, files: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": relative}
    folder = worktree / relative.rstrip("/")
    if files is None:
        files, capped = _count_files(folder)
        if capped:
            entry["capped"] = True
    entry["files"] = files
    if (folder / ".git").exists():
        entry["repository"] = True
    return entry


def worktree_pending(
    *, repository: Repository, worktree: Path, written: set[str], environment: Iterable[str] = ()
) -> PendingChanges:
    """The commit rule: changes to tracked files are committed (test commands rarely
    rewrite tracked files, and a Coder's edit or deletion of one shows only there); a
    NEW path only when the Coder wrote it through its tools (``written``, relative
    paths); every other new path — test reports, caches, build output, a nested
    repository a test made — is left out and listed. Ignored files are not looked at at
    all, and what the run's environment restored (``environment``: its ``.venv``,
    ``node_modules``… where the repository does not ignore them) is neither committed
    nor listed: it is the environment, not the run's doing."""
    restored = tuple(path.rstrip("/") for path in environment if path)
    access = worktree_access(Path(repository.path), worktree)
    # normal, not all: a new folder is one line however many files it holds.
    listing = run_git(
        ["status", "--porcelain", "--no-renames", "-z", "--untracked-files=normal", "--ignore-submodules=dirty"],
        cwd=worktree,
        access=access,
    ).stdout
    changes: list[dict[str, str]] = []
    left_out: list[dict[str, Any]] = []
    for entry in (entry for entry in listing.split("\x00") if len(entry) > 3):
        status, path = entry[:2], entry[3:]
        if status == "??" and any(path.rstrip("/") == kept or path.startswith(kept + "/") for kept in restored):
            continue
        if status != "??":
            changes.append({"action": _status_action(status), "file_path": path})
        elif not path.endswith("/"):
            if path in written:
                changes.append({"action": "create", "file_path": path})
            else:
                left_out.append({"path": path})
        elif any(name.startswith(path) for name in written):
            # A new folder the Coder wrote into: its files one by one (only here, where
            # it wrote), the Coder's committed, the rest left out as one entry.
            inside = run_git(
                ["ls-files", "--others", "--exclude-standard", "-z", "--", f":(literal){path}"],
                cwd=worktree,
                access=access,
            ).stdout
            others = 0
            for name in (name for name in inside.split("\x00") if name):
                if name in written and not name.endswith("/"):
                    changes.append({"action": "create", "file_path": name})
                else:
                    others += 1
            if others:
                left_out.append(_left_out_folder(worktree, path, others))
        else:
            left_out.append(_left_out_folder(worktree, path))
    if len(left_out) > LEFT_OUT_MAX_ENTRIES:
        more = len(left_out) - LEFT_OUT_MAX_ENTRIES
        left_out = [*left_out[:LEFT_OUT_MAX_ENTRIES], {"path": "", "more": more}]
    return PendingChanges(changes=sorted(changes, key=lambda change: change["file_path"]), left_out=left_out)


def worktree_commit(
    *,
    repository: Repository,
    worktree: Path,
    message: str,
    written: Iterable[str] = (),
    pending: PendingChanges | None = None,
) -> str | None:
    """Commit what the commit rule keeps (``pending``, or :func:`worktree_pending` of
    the Coder's ``written`` paths), nothing else the worktree holds; the new commit, or
    None if nothing changed."""
    if pending is None:
        pending = worktree_pending(repository=repository, worktree=worktree, written=set(written))
    changes = pending.changes
    access = worktree_access(Path(repository.path), worktree)
    removed = [change["file_path"] for change in changes if change["action"] == "delete"]
    added = [change["file_path"] for change in changes if change["action"] != "delete"]
    if removed:
        # From the index only, by name: a folder the command made where the file was is
        # not added through the removal's pathspec.
        run_git(
            ["rm", "--cached", "--quiet", "--ignore-unmatch", "-r", "--pathspec-from-file=-", "--pathspec-file-nul"],
            cwd=worktree,
            access=access,
            input=_literal(removed),
        )
    if added:
        run_git(
            ["add", "--pathspec-from-file=-", "--pathspec-file-nul"], cwd=worktree, access=access, input=_literal(added)
        )
    if git_succeeds(["diff", "--cached", "--quiet", "--no-ext-diff", "--no-textconv"], cwd=worktree, access=access):
        return None
    run_git(["commit", "--quiet", "--no-verify", "-F", "-"], cwd=worktree, access=access, input=message)
    return git_output(["rev-parse", "HEAD"], cwd=worktree, access=access)


def _merge_base(repo: Path, base: str, head: str) -> str:
    return git_output(["merge-base", base, head], cwd=repo, access=repository_read_access(repo))


def _blob(repo: Path, rev: str, path: str) -> tuple[str, bool]:
    """A file's text at ``rev`` and whether it is binary (or too large to show)."""
    data = git_blob(f"{rev}:{path}", cwd=repo, access=repository_read_access(repo))
    if len(data) > MAX_DIFF_FILE_BYTES or b"\x00" in data[:8000]:
        return "", True
    return data.decode("utf-8", errors="replace"), False


def _submodule_entry(path: str, action: str, old: str, new: str) -> dict[str, Any]:
    """A submodule (gitlink) the branch added, moved or removed: its commits, not files."""
    lines = {"old": f"Subproject commit {old}\n" if action != "create" else "", "new": ""}
    lines["new"] = f"Subproject commit {new}\n" if action != "delete" else ""
    return {
        "file_path": path,
        "action": action,
        "content": lines["new"],
        "old_content": lines["old"],
        "new_content": lines["new"],
        "submodule": True,
    }


def branch_changed_files(*, repository: Repository, base: str, head: str) -> list[dict[str, Any]]:
    """What ``head`` changed since it left ``base``, file by file: both versions, and the
    seed's shape ``{file_path, content, action}`` (``content``: the file after the change,
    empty for a deletion) for whoever reads a run's changes that way."""
    repo = Path(repository.path)
    start = _merge_base(repo, base, head)
    # --raw: modes and object ids, so that a submodule (mode 160000, a commit) is not
    # read as a file.
    listing = git_output(
        ["diff", "--raw", "--no-abbrev", "--no-renames", "-z", start, head],
        cwd=repo,
        access=repository_read_access(repo),
    )
    parts = [part for part in listing.split("\x00") if part]
    files: list[dict[str, Any]] = []
    for header, path in zip(parts[0::2], parts[1::2], strict=False):
        old_mode, new_mode, old_id, new_id, status = header.lstrip(":").split(" ")[:5]
        action = {"A": "create", "D": "delete"}.get(status[:1], "modify")
        if GITLINK_MODE in (old_mode, new_mode):
            files.append(_submodule_entry(path, action, old_id, new_id))
            continue
        old, old_binary = ("", False) if action == "create" else _blob(repo, start, path)
        new, new_binary = ("", False) if action == "delete" else _blob(repo, head, path)
        entry: dict[str, Any] = {
            "file_path": path,
            "action": action,
            "content": new,
            "old_content": old,
            "new_content": new,
        }
        if old_binary or new_binary:
            entry.update(content="", old_content="", new_content="", binary=True)
        files.append(entry)
    return sorted(files, key=lambda entry: entry["file_path"])


def branch_diff(*, repository: Repository, base: str, head: str) -> str:
    repo = Path(repository.path)
    start = _merge_base(repo, base, head)
    return run_git(
        ["diff", "--no-color", "--no-ext-diff", "--no-textconv", start, head],
        cwd=repo,
        access=repository_read_access(repo),
    ).stdout


@dataclass
class MergeResult:
    merged: bool
    commit: str = ""
    conflicts: list[str] = field(default_factory=list)
    message: str = ""


def _checked_out_in_main_tree(repo: Path, base: str) -> bool:
    head = run_git(
        ["symbolic-ref", "--quiet", "HEAD"], cwd=repo, access=repository_read_access(repo), check=False
    ).stdout.strip()
    return head == f"refs/heads/{base}"


def branch_merge(*, repository: Repository, branch: str) -> MergeResult:
    """Merge ``branch`` into the base branch without touching any working tree until
    the result is known: the merge is computed by ``git merge-tree``, committed with
    ``commit-tree`` and published with a compare-and-set ``update-ref``. When the base
    is checked out in the repository's own folder, that checkout follows (and a dirty
    one refuses the merge). Conflicts leave everything as it was."""
    repository_folder_check(repository=repository)
    repo = Path(repository.path)
    base = repository.base_branch
    reading, writing = repository_read_access(repo), repository_write_access(repo)
    old = git_output(["rev-parse", "--verify", f"refs/heads/{base}^{{commit}}"], cwd=repo, access=reading)
    tip = git_output(["rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}"], cwd=repo, access=reading)
    if git_succeeds(["merge-base", "--is-ancestor", tip, old], cwd=repo, access=reading):
        return MergeResult(True, old, [], f"{branch} is already in {base}.")
    checked_out = _checked_out_in_main_tree(repo, base)
    if checked_out and git_output(
        ["status", "--porcelain", "--untracked-files=no"], cwd=repo, access=folder_read_access(repo)
    ):
        return MergeResult(False, "", [], MERGE_DIRTY.format(base=base))
    fast_forward = git_succeeds(["merge-base", "--is-ancestor", old, tip], cwd=repo, access=reading)
    if repository.merge_strategy == MergeStrategy.FF_ONLY:
        if not fast_forward:
            return MergeResult(False, "", [], MERGE_NOT_FAST_FORWARD.format(base=base))
        new = tip
    else:
        merged = run_git(
            ["merge-tree", "--write-tree", "--name-only", "--no-messages", old, tip],
            cwd=repo,
            access=writing,
            check=False,
        )
        lines = merged.stdout.strip().splitlines()
        if merged.returncode == 1:
            conflicts = sorted(set(lines[1:]))
            return MergeResult(False, "", conflicts, MERGE_CONFLICTS.format(base=base))
        if merged.returncode != 0 or not lines:
            raise GitError(f"git merge-tree failed: {merged.stderr.strip()[:300]}")
        message = f"Merge branch '{branch}' into {base}\n\nMerged by AutoCoder on approval.\n"
        commit = run_git(
            ["commit-tree", lines[0], "-p", old, "-p", tip, "-F", "-"], cwd=repo, access=writing, input=message
        )
        new = commit.stdout.strip()
    ref = f"refs/heads/{base}"
    if not git_succeeds(["update-ref", "-m", f"autocoder: merge {branch}", ref, new, old], cwd=repo, access=writing):
        return MergeResult(False, "", [], MERGE_RACED.format(base=base))
    if checked_out:
        # The checkout's HEAD now names the merged commit: bring its files along.
        checkout = GitAccess(writable=(repository_git_dir(repo), repo), folders_only=(repo,))
        moved = run_git(["read-tree", "-m", "-u", old, new], cwd=repo, access=checkout, check=False)
        if moved.returncode != 0:
            run_git(["update-ref", ref, old, new], cwd=repo, access=writing, check=False)
            detail = moved.stderr.strip().splitlines()
            return MergeResult(False, "", [], f"the checkout of {base} could not be updated: {' '.join(detail[-2:])}")
    return MergeResult(True, new, [], f"Merged {branch} into {base}.")


def branch_format_patch(*, repository: Repository, base: str, branch: str) -> str:
    repo = Path(repository.path)
    start = _merge_base(repo, base, branch)
    return run_git(
        ["format-patch", "--stdout", "--no-signature", "--no-ext-diff", "--no-textconv", f"{start}..{branch}"],
        cwd=repo,
        access=repository_read_access(repo),
    ).stdout


def branch_delete(*, repository: Repository, branch: str, force: bool = False) -> None:
    repo = Path(repository.path)
    reading = repository_read_access(repo)
    if not git_succeeds(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=repo, access=reading):
        return
    base = repository.base_branch
    if not force and not git_succeeds(["merge-base", "--is-ancestor", branch, base], cwd=repo, access=reading):
        raise GitError(BRANCH_NOT_MERGED.format(branch=branch))
    run_git(["branch", "--quiet", "-D", branch], cwd=repo, access=repository_write_access(repo))


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
