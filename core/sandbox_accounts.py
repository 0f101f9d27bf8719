"""Which account a sandbox runs as, seen from the host.

When the server runs as root, nothing of a user's runs as root: git and the server's
own file work in repositories and worktrees run as the *storage account*
(``SANDBOX_UID``/``SANDBOX_GID``), which owns them, and each sandboxed command's bwrap
starts as a uid of its own, held for the command's duration, from a pool
(``SANDBOX_UID_POOL_START``, ``SANDBOX_UID_POOL_SIZE``): files it creates are not root's,
one run's processes never count against another's process limit, and no sandbox can
signal or read another's files. A server that is not root cannot switch users: then
everything runs as its own account.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from core.exceptions import SandboxUnavailable

logger = logging.getLogger(__name__)

SANDBOX_UNAVAILABLE = (
    "The sandbox for git and test commands cannot be made on this server: {reason} Neither git nor test "
    "commands run until it can. Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow user "
    "namespaces (in Docker: security_opt seccomp=unconfined, apparmor=unconfined and systempaths=unconfined on "
    "the web and worker services, as docker-compose.yml does); see the README, 'The sandbox'."
)
SETPRIV_MISSING = (
    "setpriv (util-linux) is not installed: a server running as root cannot start bwrap as another account."
)
NO_FREE_SLOT = "Every sandbox slot ({size}, SANDBOX_UID_POOL_SIZE) is in use; try again when a command ends."
SLOT_WAIT_SECONDS = 30.0


def storage_ids() -> tuple[int, int] | None:
    """The account that owns the repositories and worktrees AutoCoder works in, and that
    git runs as (``core.sandbox_confined.run_confined``): ``SANDBOX_UID``/``SANDBOX_GID`` when the server
    is root; None otherwise (everything is the server's own, which cannot switch users)."""
    if os.geteuid() != 0:
        return None
    return settings.SANDBOX_UID, settings.SANDBOX_GID


def as_account(ids: tuple[int, int] | None) -> list[str]:
    """The start of an argument list that runs the rest as ``ids`` (no supplementary
    groups), or nothing to stay the server's own account. ``setpriv`` (util-linux) rather
    than Popen's ``user=``: with it Python forks the whole server process (~25 ms for a
    400 MB one, on every git command) instead of spawning."""
    if ids is None:
        return []
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if setpriv is None:
        raise SandboxUnavailable(SANDBOX_UNAVAILABLE.format(reason=SETPRIV_MISSING))
    return [setpriv, f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups", "--"]


def as_storage_account() -> list[str]:
    """The start of an argument list that runs the rest as the storage account (nothing
    when the server is not root): for the server's own file work in folders a user's
    files could have put links in."""
    return as_account(storage_ids())


# --- The pool of uids for commands running at the same moment ----------------------


def _slots_folder() -> Path:
    # One folder for every process of the host (not per deployment, not per TMPDIR):
    # two workers must never hand out the same uid at once. Only root hands out uids.
    base = Path("/run") if Path("/run").is_dir() else Path("/var/tmp")  # noqa: S108 - root's own, 0700
    folder = base / "autocoder-sandbox-slots"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


_slot_turn = itertools.count(secrets.randbelow(1 << 16))


def _processes_of(uid: int) -> list[int]:
    """The live processes running as ``uid`` (zombies left for their parent to reap
    run nothing and are not waited for)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


def _end_processes_of(uid: int) -> None:
    """Kill whatever still runs as a slot's uid and wait until it is gone: the next
    holder of the slot must start with the whole process limit and nothing of the last
    command's (a background process that outlived its sandbox, a zombie not reaped)."""
    import signal

    deadline = time.monotonic() + 5
    while pids := _processes_of(uid):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            logger.warning("Processes of sandbox uid %s did not end: %s", uid, pids[:10])
            return
        time.sleep(0.02)


@contextlib.contextmanager
def sandbox_slot() -> Iterator[tuple[int, int] | None]:
    """The uid/gid a sandboxed command's bwrap starts as, held for the command's
    duration: a distinct one from the pool for each command running at the same moment
    on this host (a lock file per slot, released when the holder ends, even killed).
    None when the server is not root: it cannot switch users."""
    if os.geteuid() != 0:
        yield None
        return
    import fcntl

    size = settings.SANDBOX_UID_POOL_SIZE
    folder = _slots_folder()
    deadline = time.monotonic() + SLOT_WAIT_SECONDS
    while True:
        # Round the pool, not lowest first: a slot just given back may still count its
        # last command's zombies (until the host's init reaps them) against the limit.
        start = next(_slot_turn)
        for slot in ((start + offset) % size for offset in range(size)):
            handle = open(folder / f"{slot}.lock", "a")  # noqa: SIM115 - held until the command ends
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            uid = settings.SANDBOX_UID_POOL_START + slot
            try:
                _end_processes_of(uid)  # a holder killed before it could
                yield uid, uid
                return
            finally:
                _end_processes_of(uid)
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
        if time.monotonic() > deadline:
            raise SandboxUnavailable(NO_FREE_SLOT.format(size=size))
        time.sleep(0.1)
