"""The one place that runs git: never through a shell, with a scrubbed environment,
never running a repository's hooks, and with only safe transports allowed (git's
``ext::`` transport would run any command it is given)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from django.conf import settings

from core.exceptions import ApplicationError

GIT = "git"
# Configuration for every call: no hooks (a repository's hooks are code we did not
# review), no transports beyond file/https/ssh/git, no signing prompts, a committer
# identity, and paths printed as they are.
BASE_CONFIG = (
    "core.hooksPath=/dev/null",
    # Programs a repository's own config could name, which git would run as the server:
    # the file-system monitor, pager, editor and credential helpers. The config itself
    # cannot be written from the sandbox (core/sandbox.py restores a worktree's .git),
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
)
GIT_FAILED = "git {command} failed: {detail}"
GIT_TIMED_OUT = "git {command} did not finish within {seconds:g} s."
GIT_MISSING = "git is not installed on the server."


class GitError(ApplicationError):
    code = "git_error"


def git_env() -> dict[str, str]:
    """Nothing of the server's environment (keys, settings) reaches git or what it runs."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": os.environ.get("HOME") or tempfile.gettempdir(),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new",
    }


def run_git(
    args: list[str],
    *,
    cwd: Path,
    timeout: float | None = None,
    check: bool = True,
    input: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    config = [part for item in BASE_CONFIG for part in ("-c", item)]
    seconds = timeout if timeout is not None else settings.GIT_TIMEOUT_SECONDS
    try:
        result = subprocess.run(  # noqa: S603 - an argument list, never a shell
            [GIT, *config, *args],
            cwd=cwd,
            env={**git_env(), **(extra_env or {})},
            input=input,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=seconds,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise GitError(GIT_TIMED_OUT.format(command=args[0], seconds=seconds)) from None
    except FileNotFoundError as exc:
        if not Path(cwd).is_dir():
            raise GitError(GIT_FAILED.format(command=args[0], detail=f"the folder {cwd} does not exist")) from None
        raise GitError(GIT_MISSING) from exc
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise GitError(GIT_FAILED.format(command=args[0], detail=" ".join(detail[-3:])[:500] or "no output"))
    return result


def git_output(args: list[str], *, cwd: Path, timeout: float | None = None) -> str:
    return run_git(args, cwd=cwd, timeout=timeout).stdout.strip()


def git_succeeds(args: list[str], *, cwd: Path) -> bool:
    return run_git(args, cwd=cwd, check=False).returncode == 0


def git_blob(spec: str, *, cwd: Path) -> bytes:
    """The bytes of a blob (``rev:path``), undecoded: binary files stay binary."""
    config = [part for item in BASE_CONFIG for part in ("-c", item)]
    try:
        result = subprocess.run(  # noqa: S603 - an argument list, never a shell
            [GIT, *config, "cat-file", "blob", spec],
            cwd=cwd,
            env=git_env(),
            capture_output=True,
            timeout=settings.GIT_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GitError(GIT_TIMED_OUT.format(command="cat-file", seconds=settings.GIT_TIMEOUT_SECONDS)) from None
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", errors="replace").strip()
        raise GitError(GIT_FAILED.format(command="cat-file", detail=detail[:300] or "no output"))
    return result.stdout
