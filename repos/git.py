"""The one place that runs git: in the sandbox, as the storage account, seeing only the
folders the command needs (core.sandbox_confined.run_confined) — never with the server's
rights, whatever the repository's config, attributes, nested repositories or push target
would make git start; never through a shell, with an empty environment, never running a
repository's hooks, and with only safe transports allowed (git's ``ext::`` transport
would run any command it is given).

Every call says what it may see (:class:`GitAccess`): by default its working folder
(a repository with its ``.git``), read-write; a worktree's commands also need the
repository's ``.git`` (:func:`worktree_access`); a clone or push over the network
gets the network and nothing else of the host.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from django.conf import settings

from core.exceptions import ApplicationError, SandboxUnavailable
from core.sandbox_bwrap import SYSTEM_PATH
from core.sandbox_confined import Confinement, run_confined

# What one git command may see; folders are bound at their own paths.
GitAccess = Confinement

GIT = "git"
# Configuration for every call: no hooks (a repository's hooks are code we did not
# review), no transports beyond file/https/ssh/git, no signing prompts, a committer
# identity, and paths printed as they are.
BASE_CONFIG = (
    "core.hooksPath=/dev/null",
    # Programs a repository's own config could name, which git would run as the server:
    # the file-system monitor, pager, editor and credential helpers. The config itself
    # cannot be written from the sandbox (core/sandbox_handover.py restores a worktree's .git),
    # but a linked folder's may have been written by anyone.
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.editor=false",
    "sequence.editor=false",
    "credential.helper=",
    "gpg.program=false",
    "safe.bareRepository=explicit",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "core.quotepath=off",
    "advice.detachedHead=false",
    "user.name=AutoCoder",
    "user.email=autocoder@localhost",
    # Repositories are vetted by path (under REPOS_ROOT); their owner may be another
    # account than the server's.
    "safe.directory=*",
    # Confined to one repository and one worktree, git would take every other worktree
    # of the repository for gone: its automatic gc never prunes worktrees, and runs in
    # the foreground (a detached one would die with the sandbox).
    "gc.worktreePruneExpire=never",
    "gc.autoDetach=false",
    # Never step into nested repositories (a submodule's folder may hold one that a
    # test command made, with a config of its own): not to check them for changes,
    # not to update them.
    "diff.ignoreSubmodules=dirty",
    "submodule.recurse=false",
    # Files change owner between the storage account and a test command's own (and the
    # change of owner changes ctime): that is not a change of content.
    "core.checkStat=minimal",
    "core.trustctime=false",
)
GIT_FAILED = "git {command} failed: {detail}"
GIT_TIMED_OUT = "git {command} did not finish within {seconds:g} s."
GIT_MISSING = "git is not installed on the server."


class GitError(ApplicationError):
    code = "git_error"


class GitTimedOut(GitError):
    code = "git_timed_out"


class GitSandboxUnavailable(GitError):
    """No sandbox can be made here, so git does not run at all."""

    code = "sandbox_unavailable"


def git_env() -> dict[str, str]:
    """Nothing of the server's environment (keys, settings) reaches git or what it runs."""
    return {
        "PATH": SYSTEM_PATH,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new",
    }


def repository_git_dir(repo: Path) -> Path:
    """The ``.git`` folder of a repository's working tree (or the repository itself
    when it is bare)."""
    inner = repo / ".git"
    return inner if inner.is_dir() and not inner.is_symlink() else repo


def folder_read_access(folder: Path) -> GitAccess:
    """A working tree and its ``.git``, read-only: a folder looked at, never changed."""
    return GitAccess(read_only=(folder,))


def repository_read_access(repo: Path) -> GitAccess:
    """A repository's ``.git``, read-only, without its working tree: refs, blobs, diffs."""
    return GitAccess(read_only=(repository_git_dir(repo),))


def repository_write_access(repo: Path) -> GitAccess:
    """A repository's ``.git``, read-write, without its working tree."""
    return GitAccess(writable=(repository_git_dir(repo),))


def worktree_access(repo: Path, worktree: Path) -> GitAccess:
    """A run's worktree and the ``.git`` of the repository it belongs to — not the
    repository's own working tree."""
    return GitAccess(writable=(repository_git_dir(repo), worktree), folders_only=(worktree,))


def _run(
    args: list[str],
    *,
    cwd: Path,
    access: GitAccess | None,
    timeout: float | None,
    input: bytes | None,
    extra_env: dict[str, str] | None,
) -> subprocess.CompletedProcess[bytes]:
    config = [part for item in BASE_CONFIG for part in ("-c", item)]
    seconds = timeout if timeout is not None else settings.GIT_TIMEOUT_SECONDS
    confinement = access if access is not None else GitAccess(writable=(Path(cwd),))
    missing = [path for path in (Path(cwd), *confinement.writable, *confinement.read_only) if not path.exists()]
    if missing:
        raise GitError(GIT_FAILED.format(command=args[0], detail=f"the folder {missing[0]} does not exist"))
    try:
        return run_confined(
            [GIT, *config, *args],
            cwd=Path(cwd),
            confinement=confinement,
            environment={**git_env(), **(extra_env or {})},
            timeout=seconds,
            input=input,
        )
    except subprocess.TimeoutExpired:
        raise GitTimedOut(GIT_TIMED_OUT.format(command=args[0], seconds=seconds)) from None
    except SandboxUnavailable as exc:
        raise GitSandboxUnavailable(exc.message) from None
    except FileNotFoundError as exc:
        raise GitError(GIT_MISSING) from exc


def run_git(
    args: list[str],
    *,
    cwd: Path,
    access: GitAccess | None = None,
    timeout: float | None = None,
    check: bool = True,
    input: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``git args`` in ``cwd``, confined to ``access`` (default: ``cwd`` read-write)."""
    raw = _run(
        args,
        cwd=cwd,
        access=access,
        timeout=timeout,
        input=input.encode("utf-8") if input is not None else None,
        extra_env=extra_env,
    )
    stdout = raw.stdout.decode("utf-8", errors="replace")
    stderr = raw.stderr.decode("utf-8", errors="replace")
    if raw.returncode != 0 and stderr.startswith("bwrap: execvp git"):
        raise GitError(GIT_MISSING)
    result = subprocess.CompletedProcess(raw.args, raw.returncode, stdout, stderr)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise GitError(GIT_FAILED.format(command=args[0], detail=" ".join(detail[-3:])[:500] or "no output"))
    return result


def git_output(args: list[str], *, cwd: Path, access: GitAccess | None = None, timeout: float | None = None) -> str:
    return run_git(args, cwd=cwd, access=access, timeout=timeout).stdout.strip()


def git_succeeds(args: list[str], *, cwd: Path, access: GitAccess | None = None) -> bool:
    return run_git(args, cwd=cwd, access=access, check=False).returncode == 0


def git_run_bytes(
    args: list[str], *, cwd: Path, access: GitAccess | None = None, input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """run_git with bytes in and out, unchecked: for output whose sizes count bytes
    (``cat-file --batch``)."""
    return _run(args, cwd=cwd, access=access, timeout=None, input=input, extra_env=None)


def git_blob(spec: str, *, cwd: Path, access: GitAccess | None = None) -> bytes:
    """The bytes of a blob (``rev:path``), undecoded: binary files stay binary."""
    result = _run(["cat-file", "blob", spec], cwd=cwd, access=access, timeout=None, input=None, extra_env=None)
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", errors="replace").strip()
        raise GitError(GIT_FAILED.format(command="cat-file", detail=detail[:300] or "no output"))
    return result.stdout
