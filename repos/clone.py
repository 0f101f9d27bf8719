"""Cloning from a URL, and pushing a run's branch to one, without becoming a way into
the server's own network.

A clone URL names a host the server then connects to. Left alone, ``git://127.0.0.1:
8096/…`` reached an internal service and the error showed what it answered. So:

- only https, ssh (``ssh://`` and ``user@host:path``) and git transports, and for the
  clone itself only the one the URL names (no ``file``, no ``ext``);
- the host is resolved and every address must be public — loopback, private,
  link-local (cloud metadata at 169.254.169.254 included), shared, reserved and
  multicast addresses are refused unless ``CLONE_ALLOWED_NETWORKS`` lists them;
- the connection goes to the address that was checked (https: curl's resolve pin;
  ssh: ``HostName``; git: the address in the URL), so a second DNS answer cannot send
  it elsewhere, and https redirects are not followed;
- git's own words about a failed clone are not shown (they carry the remote's reply):
  the user gets what happened, in ours.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.core.exceptions import ValidationError

from core.addresses import address_allowed
from core.sandbox_accounts import storage_ids

from .git import GitAccess, GitError, repository_git_dir, run_git

DEFAULT_PORTS = {"https": 443, "ssh": 22, "git": 9418}
HOST_NOT_ALLOWED = (
    "The clone URL's host is on a private, loopback, link-local or otherwise internal address, which the "
    "server does not connect to (an operator can allow networks with CLONE_ALLOWED_NETWORKS)."
)
HOST_UNRESOLVED = "The clone URL's host name does not resolve."
HOST_UNREACHABLE = "The repository's host did not answer (refused, unreachable or timed out). Try again later."
REPOSITORY_REFUSED = (
    "The host refused the clone: the repository does not exist, or it needs credentials the server does not have."
)
CLONE_FAILED = "git could not clone the repository."
BAD_CLONE_URL = "The clone URL has no host."
SSH_KEY_UNREADABLE = "The server cannot read its ssh key (GIT_SSH_KEY_FILE); an operator has to look."
LOCAL_CLONE_FAILED = "git could not clone that folder: it is not a git repository with commits."


_UNREACHABLE_SIGNS = (
    "connection refused",
    "timed out",
    "no route to host",
    "network is unreachable",
    "couldn't connect",
)
_REFUSED_SIGNS = ("not found", "authentication", "permission denied", "could not read username", "access denied")


@dataclass(frozen=True)
class CloneTarget:
    scheme: str  # https, ssh or git
    host: str
    port: int


def parse_clone_url(url: str) -> CloneTarget:
    """The scheme, host and port a clone URL names; ValidationError on ``url`` when it
    names none that can be connected to."""
    if "://" in url:
        try:
            # Both raise ValueError for what is not a URL: a bracket left open or not an
            # IPv6 address ("https://[::1/x"), a port that is not a number from 0 to 65535,
            # a host that NFKC normalisation turns into a path.
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ValidationError(
                {"url": ["The clone URL is not a valid URL: check its host and its port (1 to 65535)."]}
            ) from None
        if not parts.hostname:
            raise ValidationError({"url": [BAD_CLONE_URL]})
        # A name in ASCII letters, digits, dots, hyphens (underscores), or an IPv6 literal:
        # an international (or percent-encoded) name is resolved here one way and by git's
        # curl maybe another, and then the checked address would not be the one pinned.
        host = parts.hostname
        if "[" in parts.netloc or ":" in host:
            try:
                if "%" in host:  # a zone: an interface of this server's
                    raise ValueError(host)
                ipaddress.IPv6Address(host)
            except ValueError:
                raise ValidationError({"url": ["The clone URL's host is not an IP address or host name."]}) from None
        elif not (host.isascii() and all(ch.isalnum() or ch in "._-" for ch in host)):
            raise ValidationError(
                {"url": ["Write the clone URL's host in ASCII (an international name in its xn-- form)."]}
            )
        if port == 0:
            raise ValidationError({"url": ["The clone URL's port must be from 1 to 65535."]})
        return CloneTarget(parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme])
    # user@host:path — ssh
    host = url.split("@", 1)[1].split(":", 1)[0]
    return CloneTarget("ssh", host, DEFAULT_PORTS["ssh"])


def resolve(target: CloneTarget) -> list[str]:
    """The host's addresses; raises socket.gaierror when it does not resolve."""
    infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def clone_host_check(url: str) -> None:
    """At request time: refuse a URL whose host is, or resolves to, an internal address.
    A host that does not resolve now is left to the clone itself, which checks again."""
    target = parse_clone_url(url)
    try:
        addresses = resolve(target)
    except (socket.gaierror, UnicodeError):
        return
    if not all(address_allowed(address) for address in addresses):
        raise ValidationError({"url": [HOST_NOT_ALLOWED]})


def _pinned(url: str, target: CloneTarget, address: str) -> tuple[str, list[str], dict[str, str]]:
    """The URL, extra git config and environment that make git connect to ``address``."""
    literal = f"[{address}]" if ":" in address else address
    if target.scheme == "https":
        return url, [f"http.curloptResolve={target.host}:{target.port}:{address}", "http.followRedirects=false"], {}
    if target.scheme == "git":
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=f"{literal}:{target.port}")), [], {}
    ssh = f"ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o HostName={address}"
    return url, [], {"GIT_SSH_COMMAND": ssh}


@contextmanager
def _ssh_identity(environment: dict[str, str], access: GitAccess) -> Iterator[tuple[dict[str, str], GitAccess]]:
    """For git over ssh in the sandbox, which sees no file of the server's: the
    operator's key (``GIT_SSH_KEY_FILE``), copied for the storage account for this one
    command, and the hosts it has met (``REPOS_ROOT/.ssh_known_hosts``), so that a host
    whose key changed is refused. Other transports: unchanged."""
    if "GIT_SSH_COMMAND" not in environment:
        yield environment, access
        return
    known = Path(settings.REPOS_ROOT) / ".ssh_known_hosts"
    known.touch(mode=0o600, exist_ok=True)
    options = f" -o UserKnownHostsFile={known}"
    readable = access.read_only
    with tempfile.TemporaryDirectory(prefix="autocoder-ssh-") as folder:
        if settings.GIT_SSH_KEY_FILE:
            key = Path(folder) / "key"
            try:
                shutil.copyfile(settings.GIT_SSH_KEY_FILE, key)
            except OSError:
                raise GitError(SSH_KEY_UNREADABLE) from None
            key.chmod(0o600)
            ids = storage_ids()
            if ids is not None:
                os.chown(folder, *ids)
                os.chown(key, *ids)
            options += f" -i {key} -o IdentitiesOnly=yes"
            readable = (*readable, Path(folder))
        command = environment["GIT_SSH_COMMAND"] + options
        yield (
            {**environment, "GIT_SSH_COMMAND": command},
            dataclasses.replace(access, read_only=readable, writable=(*access.writable, known)),
        )


def _explain(stderr: str) -> str:
    text = stderr.lower()
    if "could not resolve" in text or "name or service not known" in text:
        return HOST_UNRESOLVED
    if any(
        sign in text
        for sign in (
            "connection refused",
            "timed out",
            "no route to host",
            "network is unreachable",
            "couldn't connect",
        )
    ):
        return HOST_UNREACHABLE
    if any(
        sign in text
        for sign in ("not found", "authentication", "permission denied", "could not read username", "access denied")
    ):
        return REPOSITORY_REFUSED
    return CLONE_FAILED


def _network_git(
    url: str, target: CloneTarget, unresolved: GitError, not_allowed: GitError
) -> tuple[str, list[str], dict[str, str]]:
    """For a git command reaching ``url``: the URL to give it, its ``-c`` options (only
    the URL's transport allowed, the connection pinned to a checked address) and extra
    environment. Raises ``unresolved`` or ``not_allowed``."""
    try:
        addresses = resolve(target)
    except (socket.gaierror, UnicodeError):
        raise unresolved from None
    if not all(address_allowed(address) for address in addresses):
        raise not_allowed
    pinned, config, environment = _pinned(url, target, addresses[0])
    transports = [
        f"protocol.{scheme}.allow={'always' if scheme == target.scheme else 'never'}"
        for scheme in ("file", *DEFAULT_PORTS)
    ]
    return pinned, [part for item in (*transports, *config) for part in ("-c", item)], environment


def clone_from(source: str, destination: Path) -> None:
    """``git clone`` of ``source`` (a checked URL, or a local path under REPOS_ROOT)
    into ``destination`` (a new folder in a folder of its own, which is all the clone
    may write). Raises GitError with a message of ours."""
    seconds = settings.GIT_CLONE_TIMEOUT_SECONDS
    if not source.startswith("/"):
        target = parse_clone_url(source)
        url, args, environment = _network_git(source, target, GitError(HOST_UNRESOLVED), GitError(HOST_NOT_ALLOWED))
        network = GitAccess(writable=(destination.parent,), share_network=True)
        with _ssh_identity(environment, network) as (environment, access):
            cloned = run_git(
                [*args, "clone", "--quiet", "--", url, str(destination)],
                cwd=destination.parent,
                access=access,
                timeout=seconds,
                check=False,
                extra_env=environment,
            )
        if cloned.returncode != 0:
            raise GitError(_explain(cloned.stderr))
        if target.scheme == "git":
            # The clone's origin names the host, not the address it was pinned to.
            run_git(["remote", "set-url", "origin", source], cwd=destination)
        return
    # A local repository under REPOS_ROOT that the user may use (checked by the caller):
    # read-only, its config and hooks confined with it.
    cloned = run_git(
        ["clone", "--quiet", "--no-hardlinks", "--", source, str(destination)],
        cwd=destination.parent,
        access=GitAccess(writable=(destination.parent,), read_only=(Path(source),)),
        timeout=seconds,
        check=False,
    )
    if cloned.returncode != 0:
        raise GitError(LOCAL_CLONE_FAILED)


PUSH_REMOTE_MOVED = (
    "The remote's branch {branch} has commits this one does not (someone pushed to it): nothing was pushed. "
    "Fetch and look at it, or discard this run's branch and run the task again."
)
PUSH_PROTECTED = "The remote refused the push: branch protection or a server hook declined {branch}."
PUSH_REFUSED = (
    "The remote refused the push: the repository does not exist there, or it needs credentials the server does "
    "not have (an SSH key or a credential helper for the user the server runs as)."
)
PUSH_FAILED = "git could not push {branch} to the remote."
PUSH_HOST_NOT_ALLOWED = HOST_NOT_ALLOWED.replace("clone URL's", "push URL's")
LOCAL_PUSH_FAILED = "git could not push {branch} to that folder: it is not a git repository that accepts pushes."


class PushError(GitError):
    """A push that did not happen; ``retryable`` when the remote was unreachable."""

    code = "push_failed"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, extra={"retryable": retryable})
        self.retryable = retryable


def _explain_push(stderr: str, branch: str, *, local: bool) -> PushError:
    text = stderr.lower()
    explained = _explain(stderr)
    if not local and explained in (HOST_UNRESOLVED, HOST_UNREACHABLE):
        return PushError(explained, retryable=True)
    if "protected branch" in text or "hook declined" in text:
        return PushError(PUSH_PROTECTED.format(branch=branch))
    if "[rejected]" in text or "non-fast-forward" in text or "fetch first" in text:
        return PushError(PUSH_REMOTE_MOVED.format(branch=branch))
    if local:
        return PushError(LOCAL_PUSH_FAILED.format(branch=branch))
    if explained == REPOSITORY_REFUSED:
        return PushError(PUSH_REFUSED)
    return PushError(PUSH_FAILED.format(branch=branch))


def push_to(repository: Path, remote: str, branch: str) -> None:
    """``git push`` of ``branch`` from ``repository`` to the same branch of ``remote``
    (a checked URL, or a local repository under REPOS_ROOT). Never forced: a remote
    branch with other commits is left alone. Raises PushError with a message of ours."""
    refspec = f"refs/heads/{branch}:refs/heads/{branch}"
    seconds = settings.GIT_CLONE_TIMEOUT_SECONDS
    source = repository_git_dir(repository)
    if remote.startswith("/"):
        # git starts receive-pack inside the target, with the target's config and
        # hooks: confined to the target (and this repository, read-only) like any git.
        pushed = run_git(
            ["-c", "protocol.file.allow=always", "push", "--quiet", "--", remote, refspec],
            cwd=repository,
            access=GitAccess(read_only=(source,), writable=(Path(remote),)),
            timeout=seconds,
            check=False,
        )
        if pushed.returncode != 0:
            raise _explain_push(pushed.stderr, branch, local=True)
        return
    url, args, environment = _network_git(
        remote,
        parse_clone_url(remote),
        PushError(HOST_UNRESOLVED, retryable=True),
        PushError(PUSH_HOST_NOT_ALLOWED),
    )
    with _ssh_identity(environment, GitAccess(read_only=(source,), share_network=True)) as (environment, access):
        pushed = run_git(
            [*args, "push", "--quiet", "--", url, refspec],
            cwd=repository,
            access=access,
            timeout=seconds,
            check=False,
            extra_env=environment,
        )
    if pushed.returncode != 0:
        raise _explain_push(pushed.stderr, branch, local=False)


FETCH_FAILED = "git could not fetch {branch} from the remote."


def fetch_from(repository: Path, remote: str, branch: str, into: str) -> None:
    """``git fetch`` of ``branch`` of ``remote`` (a checked URL, or a local repository
    under REPOS_ROOT) into the ref ``into`` of ``repository`` — a ref of AutoCoder's
    own, never a branch someone has checked out. The remote's upload-pack runs with the
    remote's config, confined to the remote (read-only) and this repository's ``.git``.
    Raises GitError (``retryable`` in ``extra`` when the remote was unreachable)."""
    refspec = f"+refs/heads/{branch}:{into}"
    seconds = settings.GIT_CLONE_TIMEOUT_SECONDS
    git_dir = repository_git_dir(repository)
    fetch = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules"]
    if remote.startswith("/"):
        fetched = run_git(
            ["-c", "protocol.file.allow=always", *fetch, "--", remote, refspec],
            cwd=repository,
            access=GitAccess(read_only=(Path(remote),), writable=(git_dir,)),
            timeout=seconds,
            check=False,
        )
        if fetched.returncode != 0:
            raise GitError(FETCH_FAILED.format(branch=branch), extra={"retryable": False})
        return
    url, args, environment = _network_git(
        remote,
        parse_clone_url(remote),
        GitError(HOST_UNRESOLVED, extra={"retryable": True}),
        GitError(HOST_NOT_ALLOWED, extra={"retryable": False}),
    )
    with _ssh_identity(environment, GitAccess(writable=(git_dir,), share_network=True)) as (environment, access):
        fetched = run_git(
            [*args, *fetch, "--", url, refspec],
            cwd=repository,
            access=access,
            timeout=seconds,
            check=False,
            extra_env=environment,
        )
    if fetched.returncode != 0:
        explained = _explain(fetched.stderr)
        retryable = explained in (HOST_UNRESOLVED, HOST_UNREACHABLE)
        raise GitError(explained if retryable else FETCH_FAILED.format(branch=branch), extra={"retryable": retryable})
