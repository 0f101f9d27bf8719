"""Submodules and LFS: what a repository needs beyond its own objects.

A run's worktree gets its submodules at their recorded commits (``worktree_create``
calls :func:`submodules_checkout`). Each submodule's URL comes from the repository's
``.gitmodules`` — written by whoever wrote the repository — so it passes the same checks
a clone URL passes (the caller's ``url_check``: a public host, or a local repository
under REPOS_ROOT that the owner may use) and is reached the same way (only its own
transport allowed, the connection pinned to the checked address). A URL that fails is
not fetched: the submodule's folder stays empty and a warning says why; the worktree is
made all the same. git runs confined as always (repos/git.py): the worktree and the
repository's ``.git`` (where a worktree's submodules keep their git dirs:
``.git/worktrees/<name>/modules/``), the local source read-only, or the network.

LFS: a repository whose ``.gitattributes`` route files through ``filter=lfs`` needs
``git-lfs`` on the server; without it the files are the pointers. Linking says so
(``Repository.link_warnings``, :func:`link_warnings_find`); with it, the worktree's LFS
files are pulled when it is made (:func:`lfs_pull`).
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError

from core.sandbox_bwrap import SYSTEM_PATH

from .clone import HOST_NOT_ALLOWED, HOST_UNRESOLVED, _network_git, parse_clone_url
from .git import GitAccess, GitError, run_git

logger = logging.getLogger(__name__)

GITLINK_MODE = "160000"
MAX_SUBMODULES = 50
MAX_DEPTH = 3
LFS_WITHOUT_GIT_LFS = (
    "LFS files will be pointers: install git-lfs on the server (the repository's .gitattributes use filter=lfs)."
)
SUBMODULE_URL_REFUSED = "The submodule {path} is left empty: its URL {url} is refused ({why})."
SUBMODULE_FETCH_FAILED = "The submodule {path} is left empty: git could not fetch it from {url}."
SUBMODULE_BAD_NAME = (
    "The submodule {path} is left empty: its name in .gitmodules holds characters git cannot be given safely."
)
TOO_MANY_SUBMODULES = "Only the first {limit} submodules are checked out."
LFS_PULL_FAILED = "The LFS files could not be fetched; they are pointers in this run's worktree."
LFS_SOURCE_REFUSED = "The LFS files are not fetched: the repository has no remote they may be fetched from ({why})."

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/ +-]{0,200}$")
NOT_A_URL = "not a URL, nor a path inside the repositories folder"
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:")
# A URL as a message shows it: no credentials (user:password@), at most so long.
_CREDENTIALS = re.compile(r"//[^/@\s]*@")

UrlCheck = Callable[[str], str]


@dataclass(frozen=True)
class Submodule:
    name: str
    path: str
    url: str
    commit: str


def _shown(url: str) -> str:
    return _CREDENTIALS.sub("//", url)[:200]


def _submodules_at(folder: Path, access: GitAccess, revision: str = "HEAD") -> list[Submodule]:
    """The submodules ``.gitmodules`` names at ``revision`` of the repository checked out
    in ``folder``, with the commit each is recorded at (entries without a gitlink are
    not submodules of that revision)."""
    listing = run_git(
        ["config", "--blob", f"{revision}:.gitmodules", "--null", "--get-regexp", r"^submodule\..*\.(path|url)$"],
        cwd=folder,
        access=access,
        check=False,
    )
    if listing.returncode != 0:
        return []
    fields: dict[str, dict[str, str]] = {}
    for item in listing.stdout.split("\x00"):
        key, _, value = item.partition("\n")
        if not key.startswith("submodule.") or "." not in key[len("submodule.") :]:
            continue
        name, _, field = key[len("submodule.") :].rpartition(".")
        fields.setdefault(name, {})[field] = value
    tree = run_git(["ls-tree", "-r", "-z", "--full-tree", revision], cwd=folder, access=access, check=False)
    gitlinks: dict[str, str] = {}
    for entry in tree.stdout.split("\x00"):
        header, _, path = entry.partition("\t")
        parts = header.split(" ")
        if len(parts) == 3 and parts[0] == GITLINK_MODE:
            gitlinks[path] = parts[2]
    found = []
    for name, values in fields.items():
        path, url = values.get("path", ""), values.get("url", "")
        if path in gitlinks and url and not name.startswith("-") and "\n" not in name:
            found.append(Submodule(name=name, path=path, url=url, commit=gitlinks[path]))
    return sorted(found, key=lambda submodule: submodule.path)


def submodule_url_resolve(url: str, base: str) -> str:
    """A submodule URL as git reads it: ``./x`` and ``../x`` relative to the URL of the
    repository it belongs to (its origin, or its folder when it has none)."""
    if not url.startswith(("./", "../")):
        return url
    base = base.rstrip("/")
    relative = url
    while relative.startswith(("./", "../")):
        if relative.startswith("./"):
            relative = relative[2:]
            continue
        relative = relative[3:]
        head, slash, _ = base.rpartition("/")
        if slash and head and not head.endswith(("/", ":")):
            base = head
        elif ":" in base and not base.startswith("/"):
            base = base.rpartition(":")[0] + ":"
        else:
            base = head or base
    separator = "" if base.endswith(":") else "/"
    return f"{base}{separator}{relative}"


def _checked(url: str, base: str, url_check: UrlCheck) -> tuple[str, str]:
    """The URL to fetch from (a checked network URL, or a local repository's real
    path), or ("", why it is refused)."""
    resolved = submodule_url_resolve(url, base)
    if not (resolved.startswith("/") or "://" in resolved or _SCP_LIKE.match(resolved)):
        # git would read a bare relative path against its working folder: nothing
        # the checks could vouch for.
        return "", NOT_A_URL
    try:
        return url_check(resolved), ""
    except ValidationError as error:
        return "", " ".join(error.messages)


def submodules_checkout(*, repo: Path, worktree: Path, origin: str, url_check: UrlCheck) -> list[str]:
    """Check out the worktree's submodules at their recorded commits (and theirs, a few
    levels down); the warnings for those left empty. Never raises for a submodule."""
    warnings: list[str] = []
    _checkout_level(repo, worktree, worktree, origin, url_check, warnings, depth=1)
    return warnings


def _checkout_level(
    repo: Path, worktree: Path, folder: Path, base: str, url_check: UrlCheck, warnings: list[str], *, depth: int
) -> None:
    from .git import repository_git_dir

    git_dir = repository_git_dir(repo)
    access = GitAccess(writable=(git_dir, worktree), folders_only=(worktree,))
    submodules = _submodules_at(folder, access)
    if len(submodules) > MAX_SUBMODULES:
        warnings.append(TOO_MANY_SUBMODULES.format(limit=MAX_SUBMODULES))
        submodules = submodules[:MAX_SUBMODULES]
    shown_prefix = str(folder.relative_to(worktree)).removeprefix(".")
    for submodule in submodules:
        shown_path = f"{shown_prefix}/{submodule.path}".lstrip("/")
        if not _SAFE_NAME.match(submodule.name) or ".." in submodule.name.split("/"):
            # The name goes into a -c key on the command line: one that could end the
            # key early would leave git to read the unchecked URL from .gitmodules.
            warnings.append(SUBMODULE_BAD_NAME.format(path=shown_path))
            continue
        source, why = _checked(submodule.url, base, url_check)
        if not source:
            warnings.append(SUBMODULE_URL_REFUSED.format(path=shown_path, url=_shown(submodule.url), why=why))
            continue
        if not _fetch(git_dir, worktree, folder, submodule, source):
            warnings.append(SUBMODULE_FETCH_FAILED.format(path=shown_path, url=_shown(submodule.url)))
            continue
        if depth < MAX_DEPTH:
            _checkout_level(repo, worktree, folder / submodule.path, source, url_check, warnings, depth=depth + 1)


def _fetch(git_dir: Path, worktree: Path, folder: Path, submodule: Submodule, source: str) -> bool:
    """``git submodule update --init`` of one submodule from ``source``, given on the
    command line (``-c submodule.<name>.url``): the repository's config is neither read
    for it nor written, and its ``update`` mode is a plain checkout (never a command)."""
    name = submodule.name
    config = [f"submodule.{name}.url={source}", f"submodule.{name}.update=checkout", "submodule.recurse=false"]
    environment: dict[str, str] = {}
    if source.startswith("/"):
        # A local repository under REPOS_ROOT (checked): read-only, the file transport
        # for it only.
        access = GitAccess(writable=(git_dir, worktree), read_only=(Path(source),), folders_only=(worktree,))
        options = [part for item in config for part in ("-c", item)]
    else:
        try:
            pinned, transport, environment = _network_git(
                source, parse_clone_url(source), GitError(HOST_UNRESOLVED), GitError(HOST_NOT_ALLOWED)
            )
        except (GitError, ValidationError):
            return False
        config[0] = f"submodule.{name}.url={pinned}"
        # The file transport is refused here: a network submodule names no local folder.
        access = GitAccess(writable=(git_dir, worktree), folders_only=(worktree,), share_network=True)
        options = [*transport, *(part for item in config for part in ("-c", item))]
    try:
        updated = run_git(
            [*options, "submodule", "update", "--init", "--no-recommend-shallow", "--", submodule.path],
            cwd=folder,
            access=access,
            timeout=settings.GIT_CLONE_TIMEOUT_SECONDS,
            check=False,
            extra_env=environment,
        )
    except GitError:
        return False
    if updated.returncode != 0:
        logger.warning("Submodule %s not checked out: %s", submodule.path, updated.stderr.strip()[-300:])
        return False
    return True


# --- LFS ----------------------------------------------------------------------------------


def git_lfs_installed() -> bool:
    """Whether git-lfs is where git finds it in the sandbox (the system's own ``/usr``)."""
    return shutil.which("git-lfs", path=SYSTEM_PATH) is not None


def uses_lfs(folder: Path, access: GitAccess, revision: str = "HEAD") -> bool:
    """Whether a ``.gitattributes`` of ``revision`` routes files through LFS."""
    found = run_git(
        ["grep", "--quiet", "-I", "-e", "filter=lfs", revision, "--", ".gitattributes", ":(glob)**/.gitattributes"],
        cwd=folder,
        access=access,
        check=False,
    )
    return found.returncode == 0


def link_warnings_find(
    *, folder: Path, access: GitAccess, revision: str, origin: str, url_check: UrlCheck
) -> list[str]:
    """What the server cannot give the repository's runs, found when it is linked or
    cloned: LFS files without git-lfs, submodules whose URLs are refused."""
    warnings = []
    if not git_lfs_installed() and uses_lfs(folder, access, revision):
        warnings.append(LFS_WITHOUT_GIT_LFS)
    for submodule in _submodules_at(folder, access, revision)[:MAX_SUBMODULES]:
        _, why = _checked(submodule.url, origin, url_check)
        if why:
            warnings.append(SUBMODULE_URL_REFUSED.format(path=submodule.path, url=_shown(submodule.url), why=why))
    return warnings


def lfs_pull(*, repo: Path, worktree: Path, origin: str, url_check: UrlCheck) -> list[str]:
    """Fetch the worktree's LFS files where git-lfs is installed and the repository uses
    LFS; the warnings (none when all went well or there was nothing to do)."""
    from .git import repository_git_dir

    git_dir = repository_git_dir(repo)
    reading = GitAccess(writable=(git_dir, worktree), folders_only=(worktree,))
    if not git_lfs_installed() or not uses_lfs(worktree, reading):
        return []
    source, why = _checked(origin, origin, url_check) if origin else ("", "no origin")
    if not source:
        return [LFS_SOURCE_REFUSED.format(why=why)]
    local = source.startswith("/")
    access = GitAccess(
        writable=(git_dir, worktree),
        read_only=(Path(source),) if local else (),
        folders_only=(worktree,),
        share_network=not local,
    )
    try:
        pulled = run_git(
            ["lfs", "pull"], cwd=worktree, access=access, timeout=settings.GIT_CLONE_TIMEOUT_SECONDS, check=False
        )
    except GitError:
        return [LFS_PULL_FAILED]
    return [] if pulled.returncode == 0 else [LFS_PULL_FAILED]
