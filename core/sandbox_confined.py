"""Programs of the server's own (git, skopeo, umoci) confined to the folders they need.

Everything a user's repository holds is hostile: its config (filters,
``core.alternateRefsCommand``, ``core.sshCommand``…), its attributes, the nested
repositories in its folders, the config of a local push target. Rather than override
those one key at a time, no git command that reads a repository or worktree runs with
the server's rights: each runs in bubblewrap as the *storage account*
(``SANDBOX_UID``/``SANDBOX_GID`` when the server is root), which owns the repositories
and worktrees AutoCoder works in, seeing only the folders that command needs (bound at
their own paths), with no network unless it clones or pushes, and an empty environment.
A program a repository manages to start can then touch only that repository. See
ARCHITECTURE.md, "Where each behaviour lives".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from core.exceptions import SandboxUnavailable
from core.sandbox import process_kill
from core.sandbox_accounts import as_account, storage_ids
from core.sandbox_bwrap import SANDBOX_HOME, SANDBOX_TMP, bwrap_arguments, bwrap_path, support_files_write
from core.sandbox_probe import sandbox_status


@dataclass(frozen=True)
class Confinement:
    """What one confined program (git) sees: folders bound at their own paths."""

    writable: tuple[Path, ...] = ()
    read_only: tuple[Path, ...] = ()
    # Folders (worktrees) whose files the program replaces rather than rewrites: only
    # their folders are handed to the storage account before it starts.
    folders_only: tuple[Path, ...] = ()
    share_network: bool = False


def run_confined(
    argv: list[str],
    *,
    cwd: Path,
    confinement: Confinement,
    environment: dict[str, str],
    timeout: float,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` (a program of the server's own, e.g. git) in the sandbox as the
    storage account, in ``cwd``, seeing the system's ``/usr``, the confinement's folders
    and nothing else of the host; returns its exit status and output. Raises
    SandboxUnavailable (nothing started) where no sandbox can be made, and
    subprocess.TimeoutExpired (the sandbox killed) after ``timeout`` seconds.

    Where the operator turned the sandbox off (``UNSAFE_RUN_TESTS_WITHOUT_SANDBOX``) the
    program runs directly, as the server, with ``environment``."""
    status = sandbox_status()
    if not status.available:
        raise SandboxUnavailable(status.message)
    if status.disabled:
        return subprocess.run(  # noqa: S603 - the operator turned the sandbox off
            argv, cwd=cwd, env=environment, input=input, capture_output=True, timeout=timeout, check=False
        )
    bwrap = bwrap_path()
    assert bwrap is not None
    for path in confinement.writable:
        storage_take_over(path, folders_only=path in confinement.folders_only)
    ids = storage_ids()
    support = Path(tempfile.mkdtemp(prefix="autocoder-sandbox-"))
    try:
        support_files_write(support)
        arguments = bwrap_arguments(
            None,
            support,
            16,
            share_network=confinement.share_network,
            read_only=confinement.read_only,
            writable=tuple((path, str(path)) for path in confinement.writable),
            environment={**environment, "HOME": SANDBOX_HOME, "TMPDIR": SANDBOX_TMP},
            chdir=cwd,
        )
        process = subprocess.Popen(  # noqa: S603 - a fixed program of the server's, confined as described
            [*as_account(ids), bwrap, *arguments, *argv],
            env={},
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        finally:
            if process.returncode is None:  # timed out, or interrupted
                process_kill(process)
        return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
    finally:
        shutil.rmtree(support, ignore_errors=True)


def storage_take_over(path: Path, *, folders_only: bool = False) -> None:
    """Make ``path`` (a repository's ``.git``, a worktree, a push target) writable where
    git needs it by the storage account: what is not already its becomes its. git
    creates files and renames them into place, so folders are what count; files too,
    except in ``objects/`` (never rewritten: the bulk of a repository, not looked at),
    for the few it rewrites in place (reflogs, ``COMMIT_EDITMSG``). ``folders_only`` for
    worktrees, whose files git replaces (a file the server's editor made stays the
    server's until the next sandboxed command takes the worktree back). Nothing to do
    when the server is not root."""
    ids = storage_ids()
    if ids is None or not path.exists():
        return

    def own(entry_path: str, info: os.stat_result) -> None:
        if (info.st_uid, info.st_gid) != ids:
            os.chown(entry_path, *ids, follow_symlinks=False)

    def visit(folder: str, files_too: bool) -> None:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    own(entry.path, entry.stat(follow_symlinks=False))
                    visit(entry.path, files_too and entry.name != "objects")
                elif files_too:
                    own(entry.path, entry.stat(follow_symlinks=False))
            except FileNotFoundError:
                continue

    own(str(path), os.lstat(path))
    if path.is_dir() and not path.is_symlink():
        visit(str(path), not folders_only)
