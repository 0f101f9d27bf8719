"""The limits of one sandboxed command, held for the command as a whole.

rlimits are per process (``RLIMIT_AS``) or per file (``RLIMIT_FSIZE``): three processes
under a 100 MB address-space limit use 300 MB, six files under a 5 MB file-size limit
write 30 MB. So, per command (core/sandbox.py starts each one through
:class:`CommandLimits`):

- **memory and processes** are held by a cgroup made for the command (cgroup v2, or
  the v1 ``memory`` and ``pids`` controllers), removed afterwards. bwrap joins it before
  it can start anything: it reads its options from a pipe (``--args``), and the pipe is
  written only once bwrap's pid is in the cgroup. A process the kernel kills for memory
  stops the whole command ("memory limit exceeded"). Where no cgroup can be made here,
  today's rlimits hold instead (address space and processes per process/account), and
  :func:`limits_enforcement` (``/healthz``) says so.
- **disk**: ``/tmp`` and home are size-capped tmpfs (core/sandbox.py); the worktree (and
  any other writable folder) is on the host's disk, so a thread sums what the command
  added to it every ``DISK_POLL_SECONDS`` and stops it over ``SANDBOX_DISK_MB`` ("disk
  limit exceeded"); it checks once more after the command ended.
- **CPU time, core files and the size of one file** stay rlimits, set by util-linux's
  ``prlimit`` in the argument list (no ``preexec_fn``: Python calls it unsafe in a
  process with threads, and the workers run commands from threads).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from django.conf import settings

logger = logging.getLogger(__name__)

DISK_POLL_SECONDS = 0.5
# The walk of a large worktree must not take a core: at most about a tenth of one.
DISK_POLL_WALK_SHARE = 0.1
DETECT_TTL_SECONDS = 60.0
CGROUP_PREFIX = "autocoder-sandbox-"
CONTROLLERS = ("memory", "pids")

MEMORY_LIMIT_EXCEEDED = (
    "[sandbox: memory limit exceeded — the command's processes together needed more than {mb} MB "
    "(VERIFY_MEMORY_MB); it was stopped]\n"
)
DISK_LIMIT_EXCEEDED = (
    "[sandbox: disk limit exceeded — the command added more than {mb} MB to its worktree (SANDBOX_DISK_MB); "
    "it was stopped]\n"
)
PROCESS_LIMIT_REACHED = (
    "[sandbox: process limit reached — at most {count} processes at once (SANDBOX_MAX_PROCESSES); "
    "some could not start]\n"
)
PRLIMIT_MISSING = "prlimit (util-linux) is not installed: the sandbox's limits cannot be set."
NO_CGROUP_FILESYSTEM = "no cgroup filesystem is mounted"
CGROUP_REASON = "cannot make a cgroup for a command under the worker's own ({detail})"
V2_NOT_DELEGATED = (
    "cgroup v2: the controller is not enabled for the worker's cgroup's children (cgroup.subtree_control), "
    "and enabling it failed ({detail})"
)


class LimitValues(Protocol):
    """core.sandbox.Limits (not imported: that module imports this one)."""

    @property
    def memory_mb(self) -> int: ...
    @property
    def cpu_seconds(self) -> int: ...
    @property
    def file_size_mb(self) -> int: ...
    @property
    def processes(self) -> int: ...
    @property
    def disk_mb(self) -> int: ...


# --- What this host offers -------------------------------------------------------------


@dataclass(frozen=True)
class CgroupParent:
    """Where a command's cgroup is made for one controller: under the worker's own."""

    version: int
    path: Path


@dataclass(frozen=True)
class CgroupSupport:
    parents: dict[str, CgroupParent]
    reasons: dict[str, str]

    def parent(self, controller: str) -> CgroupParent | None:
        return self.parents.get(controller)


def _unescape(text: str) -> str:
    """mountinfo writes spaces, tabs, newlines and backslashes as octal escapes."""
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(escaped, plain)
    return text


@dataclass(frozen=True)
class _Mount:
    root: str
    point: str
    fstype: str
    options: frozenset[str]


def _cgroup_mounts(mountinfo: str) -> list[_Mount]:
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        separator = fields.index("-")
        if len(fields) < separator + 4 or fields[separator + 1] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(
            _Mount(
                root=_unescape(fields[3]),
                point=_unescape(fields[4]),
                fstype=fields[separator + 1],
                options=frozenset(fields[separator + 3].split(",")),
            )
        )
    return mounts


def _own_cgroups(proc_cgroup: str) -> tuple[dict[str, str], str | None]:
    """This process's cgroup per v1 controller, and its v2 cgroup."""
    v1: dict[str, str] = {}
    v2 = None
    for line in proc_cgroup.splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            v2 = path
        for controller in controllers.split(","):
            if controller:
                v1[controller] = path
    return v1, v2


def _below(mount: _Mount, own: str) -> Path | None:
    """The folder of cgroup ``own`` in ``mount``, if the mount shows it."""
    root = mount.root.rstrip("/")
    if own != root and not own.startswith(root + "/"):
        return None
    return Path(mount.point, own[len(root) :].lstrip("/"))


def _try_child(parent: Path, files: dict[str, str]) -> None:
    """Make a cgroup under parent, write files into it, remove it: raises OSError if any fails."""
    probe = parent / f"{CGROUP_PREFIX}probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    probe.mkdir()
    try:
        for name, value in files.items():
            (probe / name).write_text(value)
    finally:
        probe.rmdir()


def _probe_files(controller: str, version: int) -> dict[str, str]:
    if controller == "memory":
        return {"memory.max" if version == 2 else "memory.limit_in_bytes": str(64 * 1024 * 1024)}
    return {"pids.max": "64"}


def _error(exc: OSError) -> str:
    # No paths: /healthz is public.
    return errno.errorcode.get(exc.errno or 0, exc.__class__.__name__)


def cgroup_support_detect(
    *, mountinfo: str | None = None, proc_cgroup: str | None = None, try_child: bool = True
) -> CgroupSupport:
    """Which of ``memory`` and ``pids`` a per-command cgroup can hold here, and where it
    is made; why not for the others. Proven by making (and removing) one."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if proc_cgroup is None:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    mounts = _cgroup_mounts(mountinfo)
    own_v1, own_v2 = _own_cgroups(proc_cgroup)
    parents: dict[str, CgroupParent] = {}
    reasons: dict[str, str] = {}
    for controller in CONTROLLERS:
        candidates: list[CgroupParent] = []
        for mount in mounts:
            own = own_v2 if mount.fstype == "cgroup2" else own_v1.get(controller)
            if own is None or (mount.fstype == "cgroup" and controller not in mount.options):
                continue
            folder = _below(mount, own)
            if folder is None:
                continue
            version = 2 if mount.fstype == "cgroup2" else 1
            if version == 2:
                try:
                    offered = (folder / "cgroup.controllers").read_text().split()
                except OSError:
                    continue
                if controller not in offered:
                    continue
            candidates.append(CgroupParent(version, folder))
        if not candidates:
            reasons[controller] = NO_CGROUP_FILESYSTEM if not mounts else f"no cgroup hierarchy offers {controller}"
            continue
        for candidate in sorted(candidates, key=lambda c: -c.version):  # v2 first
            try:
                if candidate.version == 2:
                    _v2_enable(candidate.path, controller)
                if try_child:
                    _try_child(candidate.path, _probe_files(controller, candidate.version))
            except OSError as exc:
                reasons[controller] = CGROUP_REASON.format(detail=f"cgroup v{candidate.version}: {_error(exc)}")
                continue
            parents[controller] = candidate
            reasons.pop(controller, None)
            break
    return CgroupSupport(parents=parents, reasons=reasons)


def _v2_enable(parent: Path, controller: str) -> None:
    enabled = (parent / "cgroup.subtree_control").read_text().split()
    if controller in enabled:
        return
    (parent / "cgroup.subtree_control").write_text(f"+{controller}")


_detect_lock = threading.Lock()
_detected: tuple[float, CgroupSupport] | None = None


def cgroup_support(*, refresh: bool = False) -> CgroupSupport:
    """:func:`cgroup_support_detect`, cached a minute (it makes a cgroup to know)."""
    global _detected
    with _detect_lock:
        if _detected and not refresh and time.monotonic() - _detected[0] < DETECT_TTL_SECONDS:
            return _detected[1]
        try:
            support = cgroup_support_detect()
        except OSError as exc:
            reason = CGROUP_REASON.format(detail=_error(exc))
            support = CgroupSupport(parents={}, reasons=dict.fromkeys(CONTROLLERS, reason))
        _detected = (time.monotonic(), support)
        return support


def _prlimit_path() -> str | None:
    return shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")


def limits_enforcement(*, sandboxed: bool = True) -> dict[str, object]:
    """Which limits hold here, per what, and by which means: for ``/healthz`` and the
    workers' heartbeats. No paths (the endpoint is public)."""
    support = cgroup_support()

    def cgroup_or_rlimit(controller: str, value: dict[str, int], rlimit: str, per: str) -> dict[str, object]:
        parent = support.parent(controller)
        if parent is not None:
            return {"per": "command", "by": f"cgroup v{parent.version} {controller}", **value}
        return {"per": per, "by": rlimit, **value, "why_not_per_command": support.reasons.get(controller, "")}

    memory_mb = settings.VERIFY_MEMORY_MB
    report: dict[str, object] = {
        "memory": cgroup_or_rlimit("memory", {"mb": memory_mb}, "rlimit RLIMIT_AS", "process"),
        "processes": cgroup_or_rlimit(
            "pids", {"max": settings.SANDBOX_MAX_PROCESSES}, "rlimit RLIMIT_NPROC", "account (SANDBOX_UID)"
        ),
        "disk": {"per": "command", "by": "watcher (worktree)", "mb": settings.SANDBOX_DISK_MB},
        "cpu": {"per": "process", "by": "rlimit RLIMIT_CPU", "seconds": settings.VERIFY_CPU_SECONDS},
        "file_size": {"per": "file", "by": "rlimit RLIMIT_FSIZE", "mb": settings.SANDBOX_FILE_SIZE_MB},
        "wall_clock": {"per": "command", "by": "timeout", "seconds": settings.VERIFY_TIMEOUT_SECONDS},
    }
    if sandboxed:
        report["tmp"] = {"per": "command", "by": "tmpfs (/tmp and home, each)", "mb": settings.SANDBOX_TMP_SIZE_MB}
    if _prlimit_path() is None:
        report["error"] = PRLIMIT_MISSING
    return report


# --- One command's limits --------------------------------------------------------------


class LimitedProcess(subprocess.Popen[bytes]):
    """A sandboxed command's process; ``limit_exceeded`` is the message saying which
    limit stopped it (empty if none), set by the time the sandbox's block is left."""

    limit_exceeded: str = ""
    limit_notes: str = ""


@dataclass
class _Cgroup:
    controller_dirs: dict[str, Path] = field(default_factory=dict)

    @property
    def dirs(self) -> list[Path]:
        return list(dict.fromkeys(self.controller_dirs.values()))


def _make_cgroup(support: CgroupSupport, limits: LimitValues) -> _Cgroup:
    name = f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    cgroup = _Cgroup()
    wanted = {"memory": limits.memory_mb, "pids": limits.processes}
    try:
        for controller, amount in wanted.items():
            parent = support.parent(controller)
            if parent is None or amount <= 0:
                continue
            folder = parent.path / name
            if not folder.exists():
                folder.mkdir()
            cgroup.controller_dirs[controller] = folder
            if controller == "pids":
                (folder / "pids.max").write_text(str(amount))
            elif parent.version == 2:
                (folder / "memory.max").write_text(str(amount * 1024 * 1024))
                with contextlib.suppress(OSError):  # no swap accounting: nothing to cap
                    (folder / "memory.swap.max").write_text("0")
            else:
                (folder / "memory.limit_in_bytes").write_text(str(amount * 1024 * 1024))
                with contextlib.suppress(OSError):  # swap accounting off: nothing to cap
                    (folder / "memory.memsw.limit_in_bytes").write_text(str(amount * 1024 * 1024))
    except OSError:
        _remove_cgroup(cgroup)
        raise
    return cgroup


def _members(folder: Path) -> list[int]:
    try:
        return [int(line) for line in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _remove_cgroup(cgroup: _Cgroup) -> None:
    """Kill whatever is left in it (nothing, normally: bwrap's PID namespace went with
    bwrap), then remove it."""
    for folder in cgroup.dirs:
        for _ in range(100):
            if not folder.exists():
                break
            members = _members(folder)
            if not members:
                try:
                    folder.rmdir()
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        logger.warning("Could not remove the command's cgroup %s: %s", folder, exc)
                        break
            with contextlib.suppress(OSError):
                (folder / "cgroup.kill").write_text("1")
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        else:
            logger.warning("The command's cgroup %s is still busy; left behind", folder)


def _count(folder: Path, file_name: str, key: str) -> int:
    """A counter from a cgroup's ``*.events``-style file (``key N`` lines)."""
    try:
        for line in (folder / file_name).read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _oom_kills(cgroup: _Cgroup) -> int:
    folder = cgroup.controller_dirs.get("memory")
    if folder is None:
        return 0
    if (folder / "memory.events").exists():
        return _count(folder, "memory.events", "oom_kill")
    return _count(folder, "memory.oom_control", "oom_kill")


def _pids_refused(cgroup: _Cgroup) -> int:
    folder = cgroup.controller_dirs.get("pids")
    return 0 if folder is None else _count(folder, "pids.events", "max")


def disk_usage(folders: Iterable[Path]) -> int:
    """Bytes the folders take on disk (allocated blocks, each inode once, symlinks not
    followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in folders:
        for directory, dirnames, filenames in os.walk(root, followlinks=False):
            for name in (".", *dirnames, *filenames):
                try:
                    info = os.lstat(os.path.join(directory, name))
                except OSError:
                    continue
                key = (info.st_dev, info.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                total += info.st_blocks * 512
    return total


class CommandLimits:
    """The limits of one sandboxed command, from before it starts until it has ended.

    Use::

        with CommandLimits(limits, watched=(worktree,)) as guard:
            read_end = guard.gate_fd()
            process = LimitedProcess(guard.argv([bwrap, "--args", str(read_end), *command]),
                                     pass_fds=(read_end,), start_new_session=True, ...)
            guard.start(process, gate=arguments)   # cgroup joined, then bwrap gets its options
            ... the caller reads, kills ...

    Leaving the block stops the watcher, checks the disk once more, sets
    ``process.limit_exceeded`` and removes the cgroup.
    """

    def __init__(self, limits: LimitValues, *, watched: tuple[Path, ...], cgroups: bool = True) -> None:
        self.limits = limits
        self.watched = watched
        self.use_cgroups = cgroups
        self.cgroup = _Cgroup()
        self.process: LimitedProcess | None = None
        self.exceeded = ""
        self.disk_before = 0
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._gate: tuple[int, int] | None = None

    # -- before the start

    def __enter__(self) -> CommandLimits:
        if self.use_cgroups:
            self.cgroup = _make_cgroup(cgroup_support(), self.limits)
        if self.limits.disk_mb > 0:
            self.disk_before = disk_usage(self.watched)
        return self

    def gate_fd(self) -> int:
        """The read end of the pipe bwrap reads its options from (``--args``): it cannot
        fork before it has read them to the end, and they are written once it is in its
        cgroup."""
        if self._gate is None:
            self._gate = os.pipe()
        return self._gate[0]

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` under ``prlimit``: the rlimits the cgroup does not hold."""
        prlimit = _prlimit_path()
        if prlimit is None:
            raise FileNotFoundError(errno.ENOENT, PRLIMIT_MISSING)
        limits = self.limits
        cpu = limits.cpu_seconds
        file_size = limits.file_size_mb * 1024 * 1024
        options = [f"--cpu={cpu}:{cpu + 5}", "--core=0", f"--fsize={file_size}"]
        memory = limits.memory_mb * 1024 * 1024
        if memory and "memory" not in self.cgroup.controller_dirs:
            # 0: no address-space cap (Node reserves far more than it uses).
            options.append(f"--as={memory}")
        if "pids" not in self.cgroup.controller_dirs:
            options.append(f"--nproc={limits.processes}")
        return [prlimit, *options, "--", *argv]

    # -- the start

    def start(self, process: LimitedProcess, *, gate: list[str] | None = None) -> None:
        """Put the started process in the command's cgroup, then let it go on (write
        ``gate``, its options, into the pipe); watch it from now on."""
        self.process = process
        if self._gate is not None:
            os.close(self._gate[0])
        try:
            for folder in self.cgroup.dirs:
                (folder / "cgroup.procs").write_text(str(process.pid))
        except OSError:
            # Killed before the pipe closes: bwrap never runs without its options.
            self._kill()
            process.wait()
            raise
        if self._gate is not None:
            write_end = self._gate[1]
            self._gate = None
            try:
                data = bwrap_options(gate or [])
                with contextlib.suppress(BrokenPipeError):
                    while data:
                        data = data[os.write(write_end, data) :]
            finally:
                os.close(write_end)
        if self.cgroup.controller_dirs.get("memory") or self.limits.disk_mb > 0:
            self._watcher = threading.Thread(target=self._watch, name=f"sandbox-limits-{process.pid}", daemon=True)
            self._watcher.start()

    # -- while it runs

    def _over(self) -> str:
        if self._oom_kills():
            return MEMORY_LIMIT_EXCEEDED.format(mb=self.limits.memory_mb)
        if self.limits.disk_mb > 0:
            added = disk_usage(self.watched) - self.disk_before
            if added > self.limits.disk_mb * 1024 * 1024:
                return DISK_LIMIT_EXCEEDED.format(mb=self.limits.disk_mb)
        return ""

    def _oom_kills(self) -> int:
        return _oom_kills(self.cgroup)

    def _watch(self) -> None:
        assert self.process is not None
        interval = DISK_POLL_SECONDS
        while not self._stop.wait(interval):
            started = time.monotonic()
            try:
                over = self._over()
            except Exception:  # the watcher must not die silently
                logger.exception("Sandbox limits watcher failed")
                over = ""
            if over:
                self.exceeded = over
                self._kill()
                return
            interval = max(DISK_POLL_SECONDS, (time.monotonic() - started) / DISK_POLL_WALK_SHARE)

    def _kill(self) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for folder in self.cgroup.dirs:
            for pid in _members(folder):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    # -- afterwards

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        if self._gate is not None:
            if self.process is not None:  # started but never let go on
                self._kill()
                self.process.wait()
            for fd in self._gate:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._gate = None
        try:
            if self.process is not None:
                if not self.exceeded:
                    self.exceeded = self._over()
                self.process.limit_exceeded = self.exceeded
                refused = _pids_refused(self.cgroup)
                if refused:
                    self.process.limit_notes = PROCESS_LIMIT_REACHED.format(count=self.limits.processes)
        finally:
            _remove_cgroup(self.cgroup)


def bwrap_options(arguments: list[str]) -> bytes:
    """bwrap's options as ``--args`` reads them: NUL-separated."""
    return b"".join(argument.encode() + b"\0" for argument in arguments)
