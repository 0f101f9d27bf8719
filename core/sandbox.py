"""The sandbox every command that runs user or agent code goes through (bubblewrap).

A project's test command runs code its owner wrote and code an agent wrote: it is
treated as hostile. It runs in ``bwrap`` with new user, PID, IPC, UTS, network, cgroup
and mount namespaces:

- the filesystem is an empty root with the system's toolchains (``/usr`` and the
  usr-merge links) read-only, a few harmless files of ``/etc`` read-only, a private
  ``/tmp`` and home (size-capped tmpfs), and the run's worktree read-write at
  ``/workspace`` — nothing else: no other repository, no database file, no unix socket,
  no ``/proc`` of any process outside the sandbox; a project with a base image sees the
  image's tree instead of the system's ``/usr`` and ``/etc`` files
  (``ProjectSandbox.image``: core/sandbox_images.py, core/sandbox_rootfs.py);
- inside it is uid/gid 65534 with no capabilities; outside, when the server runs as
  root, bwrap itself is started as an unprivileged account of its own: each sandbox
  that runs at the same moment gets a distinct uid from a pool
  (``SANDBOX_UID_POOL_START``, ``SANDBOX_UID_POOL_SIZE``), so that files it creates are
  not root's, one run's processes never count against another's process limit, and no
  sandbox can signal or read another's files;
- bwrap is started from an empty environment (bwrap is PID 1 inside, and its
  ``/proc/1/environ`` is readable from inside), and the command gets a scrubbed one
  through ``--setenv``;
- memory, processes and disk are limited per command, CPU time and file size per
  process (core/sandbox_limits.py: a cgroup per command where the host offers one, a
  watcher of the worktree's size, rlimits set by ``prlimit``); the wall-clock timeout and
  cancel kill bwrap, which takes the whole PID namespace with it;
- bwrap reads its options from a pipe (``--args``), so that its command line — PID 1's
  ``/proc/1/cmdline`` inside — names no path of the server's.

It fails closed: :func:`sandbox_status` probes that a sandbox can be made (bwrap
installed, namespaces allowed) and the runner refuses to start a command when it
cannot. ``UNSAFE_RUN_TESTS_WITHOUT_SANDBOX`` is the operator's explicit way out.

Inside, git works read-only (core/sandbox_git.py): the worktree's ``.git`` is a pointer
of ours to a view of its repository that names no server path and cannot be written.

After a command, the worktree is taken back: owned by the storage account again, with
no setuid or setgid bits, and with its ``.git`` pointer file as git wrote it — the same
bytes in a file of its own (a command that replaced it with a directory of its own, or
kept a hard link to it to write through later, would otherwise point git elsewhere).

**Git runs here too** (:func:`run_confined`). Everything a user's repository holds is
hostile: its config (filters, ``core.alternateRefsCommand``, ``core.sshCommand``…), its
attributes, the nested repositories in its folders, the config of a local push target.
Rather than override those one key at a time, no git command that reads a repository
or worktree runs with the server's rights: each runs in bubblewrap as the *storage
account* (``SANDBOX_UID``/``SANDBOX_GID`` when the server is root), which owns the
repositories and worktrees AutoCoder works in, seeing only the folders that command
needs (bound at their own paths), with no network unless it clones or pushes, and an
empty environment. A program a repository manages to start can then touch only that
repository. See ARCHITECTURE.md, "Where each behaviour lives".
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import secrets
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from django.conf import settings

from core.exceptions import ApplicationError
from core.sandbox_git import REPOSITORY_INSIDE, WORKTREE_INSIDE, git_view_arguments, git_view_prepare
from core.sandbox_handover import FolderMarks, hand_over_kept, kept_paths_to_check, kept_roots, walk
from core.sandbox_limits import CommandLimits, LimitedProcess, bwrap_options
from core.sandbox_rootfs import ImageRoot, image_filesystem_arguments

logger = logging.getLogger(__name__)

SANDBOX_ROOT = "/workspace"
SANDBOX_HOME = "/home/sandbox"
SANDBOX_TMP = "/tmp"  # noqa: S108 - the sandbox's own tmpfs, not the host's
SANDBOX_INSIDE_ID = 65534
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Read-only from the host: the toolchains under /usr, and of /etc only files that
# programs need to start and hold no secrets (no passwd, no shadow, no service configs).
USR_MERGE_LINKS = (("usr/bin", "/bin"), ("usr/sbin", "/sbin"), ("usr/lib", "/lib"), ("usr/lib64", "/lib64"))
ETC_READ_ONLY = (
    "alternatives",
    "ca-certificates",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "mime.types",
    "nsswitch.conf",
    "java-17-openjdk",
    "os-release",
    "debian_version",
)
PROBE_TTL_SECONDS = 60.0
GIT_POINTER_FILE = "git-pointer"
NEUTRAL_GIT_POINTER = "gitdir: /repository-not-available-in-the-sandbox\n"
_ABSOLUTE_PATH = re.compile(r"/[^\s:'\"]+")

SANDBOX_UNAVAILABLE = (
    "The sandbox for git and test commands cannot be made on this server: {reason} Neither git nor test "
    "commands run until it can. Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow user "
    "namespaces (in Docker: security_opt seccomp=unconfined, apparmor=unconfined and systempaths=unconfined on "
    "the web and worker services, as docker-compose.yml does); see the README, 'The sandbox'."
)
SANDBOX_DISABLED_WARNING = (
    "[sandbox: DISABLED by UNSAFE_RUN_TESTS_WITHOUT_SANDBOX — this command runs as the server's own user "
    "and can read its files and secrets]\n"
)
BWRAP_MISSING = "bwrap (bubblewrap) is not installed or SANDBOX_BWRAP does not name it."
SETPRIV_MISSING = (
    "setpriv (util-linux) is not installed: a server running as root cannot start bwrap as another account."
)
PROBE_FAILED = "bwrap could not start a sandbox ({detail})."
PROBE_TIMED_OUT = "bwrap did not start a sandbox within 10 s."
WORKTREES_UNREACHABLE = (
    "the sandbox's accounts (SANDBOX_UID {uid} and the pool from SANDBOX_UID_POOL_START) cannot reach {setting}: "
    "every folder above it must be searchable by them (chmod o+x)."
)
IMAGE_NEEDS_SANDBOX = (
    "This repository's commands run on a base image ({reference}), which only the sandbox can show them: with "
    "UNSAFE_RUN_TESTS_WITHOUT_SANDBOX they would run on the server's own files instead. Nothing was run."
)
NO_FREE_SLOT = "Every sandbox slot ({size}, SANDBOX_UID_POOL_SIZE) is in use; try again when a command ends."
SLOT_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    disabled: bool
    reason: str

    @property
    def message(self) -> str:
        return "" if self.available else SANDBOX_UNAVAILABLE.format(reason=self.reason)

    def as_dict(self) -> dict[str, object]:
        return {"available": self.available, "disabled": self.disabled, "message": self.message}


@dataclass(frozen=True)
class Limits:
    memory_mb: int
    cpu_seconds: int
    file_size_mb: int
    processes: int
    tmp_size_mb: int
    disk_mb: int = 0  # what a command may add to its worktree; 0: not watched


@dataclass(frozen=True)
class ProjectSandbox:
    """How one project's commands (its setup script, its test command) run besides
    their worktree and limits (repos/environments/ builds it): the project's variables in
    the command's environment, the network for setup (or tests a project opted in), and
    folders of the project's own bound inside (its package cache)."""

    variables: tuple[tuple[str, str], ...] = ()
    share_network: bool = False
    # (folder on the host, place inside): writable, handed to the command's account.
    mounts: tuple[tuple[Path, str], ...] = ()
    # A container image whose tree the commands run on instead of the server's /usr
    # (core/sandbox_images.py `image_root`); None: the server's own.
    image: ImageRoot | None = None
    # The worktree's restored environments (relative paths: ".venv", "node_modules"):
    # their files are hard links nobody is handed, so handing the worktree over and
    # taking it back need not look at them (core/sandbox_handover.py).
    kept: tuple[str, ...] = ()


NO_PROJECT = ProjectSandbox()


def limits_from_settings() -> Limits:
    return Limits(
        memory_mb=settings.VERIFY_MEMORY_MB,
        cpu_seconds=settings.VERIFY_CPU_SECONDS,
        file_size_mb=settings.SANDBOX_FILE_SIZE_MB,
        processes=settings.SANDBOX_MAX_PROCESSES,
        tmp_size_mb=settings.SANDBOX_TMP_SIZE_MB,
        disk_mb=settings.SANDBOX_DISK_MB,
    )


# --- Can a sandbox be made here? ------------------------------------------------------

_probe_lock = threading.Lock()
_probe_cache: dict[tuple[str, int, int], tuple[float, SandboxStatus]] = {}


def _bwrap_path() -> str | None:
    configured = settings.SANDBOX_BWRAP
    found = shutil.which(configured) if os.sep not in configured else configured
    return found if found and os.access(found, os.X_OK) else None


def storage_ids() -> tuple[int, int] | None:
    """The account that owns the repositories and worktrees AutoCoder works in, and that
    git runs as (:func:`run_confined`): ``SANDBOX_UID``/``SANDBOX_GID`` when the server
    is root; None otherwise (everything is the server's own, which cannot switch users)."""
    if os.geteuid() != 0:
        return None
    return settings.SANDBOX_UID, settings.SANDBOX_GID


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
def _sandbox_slot() -> Iterator[tuple[int, int] | None]:
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


def sandbox_status(*, refresh: bool = False) -> SandboxStatus:
    """Whether commands can run sandboxed here; probed by starting one, cached a minute."""
    if settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX:
        return SandboxStatus(available=True, disabled=True, reason="disabled by UNSAFE_RUN_TESTS_WITHOUT_SANDBOX")
    bwrap = _bwrap_path()
    if bwrap is None:
        return SandboxStatus(available=False, disabled=False, reason=BWRAP_MISSING)
    key = (bwrap, settings.SANDBOX_UID, settings.SANDBOX_GID)
    with _probe_lock:
        cached = _probe_cache.get(key)
        if cached and not refresh and time.monotonic() - cached[0] < PROBE_TTL_SECONDS:
            return cached[1]
        status = _probe(bwrap)
        _probe_cache[key] = (time.monotonic(), status)
        return status


def _unreachable_folder(path: Path, ids: tuple[int, int] | None) -> bool:
    """Whether the sandbox's account (bwrap runs as it) cannot search down to path."""
    if ids is None:
        return False
    uid, gid = ids
    for folder in [path, *path.parents]:
        info = folder.stat()
        if info.st_uid == uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return True
    return False


def _probe(bwrap: str) -> SandboxStatus:
    # The probe's workspace is where runs' worktrees are, so that it also proves the
    # sandbox's account can reach them.
    root = Path(settings.WORKTREES_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    repos = Path(settings.REPOS_ROOT)
    repos.mkdir(parents=True, exist_ok=True)
    pool_ids = (settings.SANDBOX_UID_POOL_START, settings.SANDBOX_UID_POOL_START) if os.geteuid() == 0 else None
    for setting, folder in (("WORKTREES_ROOT", root), ("REPOS_ROOT", repos)):
        if _unreachable_folder(folder, storage_ids()) or _unreachable_folder(folder, pool_ids):
            reason = WORKTREES_UNREACHABLE.format(uid=settings.SANDBOX_UID, setting=setting)
            return SandboxStatus(available=False, disabled=False, reason=reason)
    with tempfile.TemporaryDirectory(prefix=".sandbox-probe-", dir=root) as scratch:
        workspace = Path(scratch)
        with _prepared(workspace) as (support, ids, _):
            # The options through --args, as for every command: a bwrap without it fails here.
            read_end, write_end = os.pipe()
            with open(write_end, "wb") as options:  # a few KB: the pipe holds them
                options.write(bwrap_options(_bwrap_arguments(workspace, support, 16)))
            try:
                argv = [bwrap, "--args", str(read_end), "/bin/sh", "-c", "test -w /workspace"]
                result = subprocess.run(  # noqa: S603 - a fixed argument list
                    [*_as_account(ids), *argv],
                    env={},
                    capture_output=True,
                    timeout=10,
                    check=False,
                    pass_fds=(read_end,),
                )
            except subprocess.TimeoutExpired:
                return SandboxStatus(available=False, disabled=False, reason=PROBE_TIMED_OUT)
            except SandboxUnavailable:
                return SandboxStatus(available=False, disabled=False, reason=SETPRIV_MISSING)
            except OSError as exc:
                return SandboxStatus(
                    available=False, disabled=False, reason=PROBE_FAILED.format(detail=exc.__class__.__name__)
                )
            finally:
                os.close(read_end)
    if result.returncode != 0:
        detail = result.stderr.decode("utf-8", errors="replace").strip().splitlines()
        # bwrap names paths in its errors: the reason is shown on /healthz, paths are not.
        last = _ABSOLUTE_PATH.sub("<path>", detail[-1]) if detail else f"exit {result.returncode}"
        reason = PROBE_FAILED.format(detail=last[:300])
        return SandboxStatus(available=False, disabled=False, reason=reason)
    return SandboxStatus(available=True, disabled=False, reason="")


# --- Building and running a sandboxed command -----------------------------------------


def _as_account(ids: tuple[int, int] | None) -> list[str]:
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
    return _as_account(storage_ids())


def _environment(image: ImageRoot | None = None) -> dict[str, str]:
    """The variables every sandboxed command gets, after the image's and the project's.
    On an image, its PATH (where its toolchain is) replaces the system's."""
    system_path = (image.env.get("PATH") if image is not None else None) or SYSTEM_PATH
    return {
        # What setup installed comes first, as on a developer's machine with the
        # virtualenv activated (repos/environments/).
        "PATH": f"{SANDBOX_ROOT}/.venv/bin:{SANDBOX_ROOT}/node_modules/.bin:{system_path}",
        "HOME": SANDBOX_HOME,
        "TMPDIR": SANDBOX_TMP,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "CI": "true",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def _bwrap_arguments(
    workspace: Path | None,
    support: Path,
    tmp_size_mb: int,
    *,
    share_network: bool = False,
    read_only: tuple[Path, ...] = (),
    writable: tuple[tuple[Path, str], ...] = (),
    environment: dict[str, str] | None = None,
    chdir: Path | None = None,
    image: ImageRoot | None = None,
) -> list[str]:
    """bwrap's options. ``workspace`` is bound at ``/workspace`` and is the working
    folder; without one (git, :func:`run_confined`) the ``writable`` and ``read_only``
    folders are all there is, at their own paths, and ``chdir`` the working folder.
    With ``image`` its tree is the filesystem instead of the host's ``/usr`` and
    ``/etc`` files (core/sandbox_rootfs.py); the rest is the same."""
    args = [
        "--unshare-all",
        *(["--share-net"] if share_network else []),
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--uid",
        str(SANDBOX_INSIDE_ID),
        "--gid",
        str(SANDBOX_INSIDE_ID),
        "--hostname",
        "sandbox",
        "--cap-drop",
        "ALL",
    ]
    if image is not None:
        args += image_filesystem_arguments(image, share_network=share_network)
    else:
        args += _host_filesystem_arguments()
    if share_network and Path("/etc/resolv.conf").exists():
        args += ["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
    for name in ("passwd", "group", "hostname", "hosts"):
        args += ["--ro-bind", str(support / name), f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    tmp_bytes = str(tmp_size_mb * 1024 * 1024)
    args += ["--size", tmp_bytes, "--tmpfs", SANDBOX_TMP, "--size", tmp_bytes, "--tmpfs", SANDBOX_HOME]
    for path in read_only:
        args += ["--ro-bind", str(path), str(path)]
    for source, target in writable:
        args += ["--bind", str(source), target]
    if workspace is not None:
        args += ["--bind", str(workspace), SANDBOX_ROOT, "--chdir", SANDBOX_ROOT]
        # The worktree's .git pointer names the repository's place on the server (and
        # git could not reach it here anyway): the command sees a neutral one, read-only,
        # which it can neither replace nor link under another name.
        # Where the worktree belongs to a repository under REPOS_ROOT, git works there
        # read-only, through a view that names no server path (core/sandbox_git.py).
        pointer = workspace / ".git"
        neutral = support / GIT_POINTER_FILE
        view = git_view_arguments(workspace, support, SANDBOX_ROOT)
        if view is not None:
            args += view
        elif neutral.is_file() and pointer.is_file() and not pointer.is_symlink():
            args += ["--ro-bind", str(neutral), f"{SANDBOX_ROOT}/.git"]
    elif chdir is not None:
        args += ["--chdir", str(chdir)]
    for name, value in (_environment() if environment is None else environment).items():
        args += ["--setenv", name, value]
    return args


def _host_filesystem_arguments() -> list[str]:
    """The host's toolchains (``/usr`` and the usr-merge links) and harmless ``/etc``
    files, read-only."""
    args = ["--ro-bind", "/usr", "/usr"]
    for target, link in USR_MERGE_LINKS:
        if Path(link).is_symlink() or not Path(link).exists():
            if Path("/", target).exists():
                args += ["--symlink", target, link]
        else:
            # Not a usr-merged system: the real folder, read-only.
            args += ["--ro-bind", link, link]
    for name in ETC_READ_ONLY:
        source = Path("/etc", name)
        if source.exists():
            args += ["--ro-bind", str(source), str(source)]
    return args


def _support_files(directory: Path) -> None:
    """/etc/passwd and friends for the sandbox: its own user only, nothing of the host's."""
    inside = SANDBOX_INSIDE_ID
    files = {
        "passwd": f"sandbox:x:{inside}:{inside}:sandbox:{SANDBOX_HOME}:/bin/sh\n",
        "group": f"sandbox:x:{inside}:\n",
        "hostname": "sandbox\n",
        "hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost\n",
        GIT_POINTER_FILE: NEUTRAL_GIT_POINTER,
    }
    for name, content in files.items():
        (directory / name).write_text(content)
        (directory / name).chmod(0o644)
    directory.chmod(0o755)


@contextlib.contextmanager
def _prepared(
    workspace: Path, handed_over: tuple[Path, ...] = (), *, kept: tuple[str, ...] = ()
) -> Iterator[tuple[Path, tuple[int, int] | None, FolderMarks | None]]:
    """The support files, and the worktree (and ``handed_over``, folders the caller
    removes afterwards) handed to this command's own account (when the server is root)
    for the command's duration; the worktree is always taken back afterwards. ``kept``:
    the worktree's restored environments (relative paths), whose files need no look."""
    support = Path(tempfile.mkdtemp(prefix="autocoder-sandbox-"))
    git_pointer = _read_git_pointer(workspace)
    try:
        with _sandbox_slot() as ids:
            _support_files(support)
            if git_pointer is not None:
                git_view_prepare(workspace, support)
            marks: FolderMarks | None = None
            try:
                if ids is not None:
                    marks = _chown_tree(workspace, *ids, kept=kept)
                    for folder in handed_over:
                        _chown_tree(folder, *ids)
                yield support, ids, marks
            finally:
                # Before the slot is freed: nothing of the worktree may stay the slot's
                # (the next holder of that uid would own it).
                workspace_reclaim(workspace, git_pointer=git_pointer, kept=kept, marks=marks)
    finally:
        shutil.rmtree(support, ignore_errors=True)


def _read_git_pointer(workspace: Path) -> bytes | None:
    pointer = workspace / ".git"
    if pointer.is_file() and not pointer.is_symlink():
        return pointer.read_bytes()
    return None


def _pointer_intact(pointer: Path, content: bytes) -> bool:
    """The ``.git`` pointer is a file of its own (no symlink, no second name a command
    could keep to write through later) holding what git wrote."""
    try:
        info = os.lstat(pointer)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and pointer.read_bytes() == content


def _chown_tree(root: Path, uid: int, gid: int, *, kept: Iterable[str] = ()) -> FolderMarks:
    """Hand ``root`` to a command's account — except files with more than one name: a
    restored environment's hard links (repos/environments/store.py) are shared with the
    kept copy and other runs, and stay the storage account's. The command may still
    delete or replace them (their folders are its own), never write into them. Under
    ``kept`` (the restored environments' paths) only folders are handed over, without a
    look at their files (core/sandbox_handover.py); the marks to take them back by."""
    tops = kept_roots(root, kept)
    for path in walk(root, prune=tops):
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(path)
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                continue
            os.chown(path, uid, gid, follow_symlinks=False)
    return hand_over_kept(tops, uid, gid)


def workspace_reclaim(
    workspace: Path,
    *,
    git_pointer: bytes | None = None,
    kept: Iterable[str] = (),
    marks: FolderMarks | None = None,
) -> None:
    """After a sandboxed command: the worktree is the storage account's again, holds no
    setuid or setgid file, and its ``.git`` is the pointer file git wrote (restored as a
    new file if the command replaced it, or linked it under another name). Under
    ``kept``, handed over with ``marks`` (:func:`_chown_tree`), the files of folders the
    command did not change are not looked at."""
    if not workspace.exists():
        return
    ids = storage_ids()
    tops = kept_roots(workspace, kept) if marks is not None else frozenset()

    def take_back(path: Path | str, info: os.stat_result) -> None:
        if ids is not None and (info.st_uid, info.st_gid) != ids:
            os.chown(path, *ids, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            return
        if info.st_mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISDIR(info.st_mode):
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))

    for path in walk(workspace, prune=tops):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        take_back(path, info)
    for kept_path, info in kept_paths_to_check(tops, marks or {}):
        with contextlib.suppress(FileNotFoundError):
            take_back(kept_path, info)
            # Nobody else may write what a command left in an environment's folder:
            # the next commands' disk watch and take-back do not look at the files of
            # folders they did not change, so those files must not be able to grow.
            if stat.S_ISREG(info.st_mode) and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                os.chmod(
                    kept_path, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH | stat.S_ISUID | stat.S_ISGID)
                )
    if git_pointer is not None:
        pointer = workspace / ".git"
        if not _pointer_intact(pointer, git_pointer):
            logger.warning("A sandboxed command replaced or linked %s; restored", pointer)
            if pointer.is_dir() and not pointer.is_symlink():
                shutil.rmtree(pointer)
            else:
                pointer.unlink(missing_ok=True)
            pointer.write_bytes(git_pointer)
            if ids is not None:
                os.chown(pointer, *ids)


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


class SandboxUnavailable(ApplicationError):
    """No sandbox can be made here; the command was not started."""

    code = "sandbox_unavailable"


@contextlib.contextmanager
def sandboxed_process(
    *, command: str, workspace: Path, limits: Limits, project: ProjectSandbox = NO_PROJECT
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``/bin/sh -c command`` in the sandbox with ``workspace`` as its working
    folder, as ``project`` says (variables, network, mounts); stdout and stderr together
    on ``process.stdout``. The caller reads it and ends the process (``process_kill``);
    leaving the block takes the worktree back.

    Raises SandboxUnavailable (nothing started) where no sandbox can be made."""
    status = sandbox_status()
    if not status.available:
        raise SandboxUnavailable(status.message)
    if status.disabled:
        with _unsandboxed_process(command=command, workspace=workspace, limits=limits, project=project) as process:
            yield process
        return
    with _bwrapped(
        argv=["/bin/sh", "-c", command],
        workspace=workspace,
        limits=limits,
        environment=command_environment(project),
        share_network=project.share_network,
        writable=project.mounts,
        stderr=subprocess.STDOUT,
        image=project.image,
        kept=project.kept,
    ) as process:
        yield process


def command_environment(project: ProjectSandbox = NO_PROJECT) -> dict[str, str]:
    """A project command's environment: the image's ``Env`` (its PYTHON_VERSION…), then
    the project's variables, then ours: neither the image nor the project replaces what
    makes the sandbox work (home, temporary folder, PATH with the worktree's tools first)."""
    image_env = project.image.env if project.image is not None else {}
    return {**image_env, **dict(project.variables), **_environment(project.image)}


@contextlib.contextmanager
def sandboxed_program(
    *,
    argv: list[str],
    workspace: Path,
    limits: Limits,
    environment: dict[str, str],
    share_network: bool = False,
    read_only: tuple[Path, ...] = (),
    writable: tuple[tuple[Path, str], ...] = (),
    stdin: IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` in the sandbox with ``workspace`` as its working folder
    (``/workspace``) and only ``environment``: a program of the server's own (the Claude
    CLI), not a shell command. ``share_network`` keeps the host's network (the program
    talks to an API); ``read_only`` paths are bound at the same place read-only (the
    program itself), ``writable`` folders at the given places inside, handed to the
    sandbox's account like the worktree. stdout is piped; stdin comes from ``stdin``
    (default: nothing), stderr goes to ``stderr``.
    The caller reads, then ends the process (``process_kill``); leaving the block takes
    the worktree back.

    Raises SandboxUnavailable (nothing started) where no sandbox can be made or the
    operator turned it off: the caller decides whether to run without."""
    status = sandbox_status()
    if not status.available or status.disabled:
        raise SandboxUnavailable(status.message or status.reason)
    with _bwrapped(
        argv=argv,
        workspace=workspace,
        limits=limits,
        environment=environment,
        share_network=share_network,
        read_only=read_only,
        writable=writable,
        stdin=stdin,
        stderr=stderr,
    ) as process:
        yield process


@contextlib.contextmanager
def _bwrapped(
    *,
    argv: list[str],
    workspace: Path,
    limits: Limits,
    environment: dict[str, str],
    share_network: bool = False,
    read_only: tuple[Path, ...] = (),
    writable: tuple[tuple[Path, str], ...] = (),
    stdin: IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
    image: ImageRoot | None = None,
    kept: tuple[str, ...] = (),
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` started in bwrap as :func:`sandboxed_program` describes, once the caller
    has checked that a sandbox can be made; on ``image``'s tree when one is given."""
    bwrap = _bwrap_path()
    assert bwrap is not None
    with _prepared(workspace, tuple(source for source, _ in writable), kept=kept) as (support, ids, marks):
        arguments = _bwrap_arguments(
            workspace,
            support,
            limits.tmp_size_mb,
            share_network=share_network,
            read_only=read_only,
            writable=writable,
            environment=environment,
            image=image,
        )
        account = _as_account(ids)
        # The limits' cgroup is joined before bwrap reads its options (--args), so before it
        # can start anything (core/sandbox_limits.py). prlimit (as the server: it may
        # raise limits), then setpriv to the command's account, then bwrap: one pid.
        with CommandLimits(limits, watched=(workspace, *(source for source, _ in writable)), kept_marks=marks) as guard:
            options = guard.gate_fd()
            process = LimitedProcess(  # user code or a fixed program, in the sandbox described above
                guard.argv([*account, bwrap, "--args", str(options), *argv]),
                env={},
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
                pass_fds=(options,),
            )
            guard.start(process, gate=arguments)
            try:
                yield process
            finally:
                process_kill(process)


@contextlib.contextmanager
def _unsandboxed_process(
    *, command: str, workspace: Path, limits: Limits, project: ProjectSandbox
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator's explicit opt-out: limits and a scrubbed environment only. A base
    image is refused: without the sandbox nothing can show its files in place of the
    server's, and running on the server's instead would pass off its toolchain as the
    image's."""
    if project.image is not None:
        raise SandboxUnavailable(IMAGE_NEEDS_SANDBOX.format(reference=project.image.reference))
    home = tempfile.mkdtemp(prefix="autocoder-unsandboxed-")
    environment = {
        **dict(project.variables),
        **_environment(),
        "HOME": home,
        "TMPDIR": home,
        "PATH": f"{workspace}/.venv/bin:{workspace}/node_modules/.bin:{SYSTEM_PATH}",
    }
    try:
        # rlimits and the disk watcher only: no cgroup (nothing holds the shell back
        # until it has joined one).
        with CommandLimits(limits, watched=(workspace,), cgroups=False) as guard:
            process = LimitedProcess(  # the operator turned the sandbox off
                guard.argv(["/bin/sh", "-c", command]),
                cwd=workspace,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            guard.start(process)
            try:
                yield process
            finally:
                process_kill(process)
    finally:
        shutil.rmtree(home, ignore_errors=True)


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
    bwrap = _bwrap_path()
    assert bwrap is not None
    for path in confinement.writable:
        storage_take_over(path, folders_only=path in confinement.folders_only)
    ids = storage_ids()
    support = Path(tempfile.mkdtemp(prefix="autocoder-sandbox-"))
    try:
        _support_files(support)
        arguments = _bwrap_arguments(
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
            [*_as_account(ids), bwrap, *arguments, *argv],
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


def process_kill(process: subprocess.Popen[bytes]) -> None:
    """End the command and everything it started: bwrap is PID 1 of the sandbox's PID
    namespace, so killing its group ends every process in it."""
    import signal

    # Only while it has not been waited for: a reaped process's pid (and group id) is
    # free for the next process the host starts, and pids come round quickly
    # (pid_max is 32768 on many hosts; every git command here starts four).
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def nested_sandbox_argv(argv: list[str], *, tmp_size_mb: int, image: ImageRoot | None = None) -> list[str]:
    """``argv`` in a sandbox made from inside one that :func:`sandboxed_program` started
    (bwrap nests: user namespaces are allowed inside one): the outer sandbox may share
    the host's network and hold a program's login (the Claude CLI's), the inner one has
    no network, a fresh ``/tmp`` and home, only ``/usr``, the outer sandbox's few
    ``/etc`` files and ``/workspace``, and the test command's environment. bwrap starts
    from an empty environment (``env -i``): the outer program's, its API key or token
    included, is not passed on, and its processes are not in the inner PID namespace.
    bwrap is the server's (``argv[2]``): the outer sandbox must see it (``/usr`` is bound;
    elsewhere the caller binds it in). With ``image`` the inner sandbox runs on the
    image's tree with its environment (as :func:`sandboxed_process` would): the outer
    sandbox must show ``image.rootfs`` at its own path, read-only."""
    arguments = _bwrap_arguments(
        Path(SANDBOX_ROOT),
        Path("/etc"),
        tmp_size_mb,
        image=image,
        environment=command_environment(ProjectSandbox(image=image)),
    )
    # The outer sandbox's read-only git view, where it has one (core/sandbox_git.py): the
    # inner /workspace carries its .git pointer, these are where it points.
    for place in (REPOSITORY_INSIDE, WORKTREE_INSIDE):
        arguments += ["--ro-bind-try", place, place]
    return ["/usr/bin/env", "-i", _bwrap_path() or "/usr/bin/bwrap", *arguments, *argv]
