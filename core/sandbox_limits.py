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
- **disk**: ``/tmp`` and home are size-capped tmpfs (core/sandbox_bwrap.py); the worktree (and
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
import stat
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from django.conf import settings

from core.sandbox_cgroups import CONTROLLERS, CgroupSupport, CommandCgroup, cgroup_support

logger = logging.getLogger(__name__)

DISK_POLL_SECONDS = 0.5
# The walk of a large worktree must not take a core: at most about a tenth of one.
DISK_POLL_WALK_SHARE = 0.1

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
UNSANDBOXED_NO_CGROUP = "the sandbox is off (UNSAFE_RUN_TESTS_WITHOUT_SANDBOX): commands run with rlimits only"


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


def _prlimit_path() -> str | None:
    return shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")


def limits_enforcement(*, sandboxed: bool = True) -> dict[str, object]:
    """Which limits hold here, per what, and by which means: for ``/healthz`` and the
    workers' heartbeats. No paths (the endpoint is public). ``sandboxed`` false: the
    operator's opt-out, whose commands get no cgroup (nothing would hold the shell back
    until it had joined one) and no tmpfs."""
    support = cgroup_support()
    if not sandboxed:
        support = CgroupSupport(parents={}, reasons=dict.fromkeys(CONTROLLERS, UNSANDBOXED_NO_CGROUP))

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


def disk_usage(folders: Iterable[Path], *, kept_marks: dict[str, int] | None = None) -> int:
    """Bytes the folders take on disk (allocated blocks, each inode once). Walked by
    file descriptor, symlinks never followed: the command may swap a folder for a link
    while it is walked. ``kept_marks``: the folders of restored environments as they were
    handed over (core/sandbox_handover.py): files shared with the kept copy are not the
    command's and are not counted, nor the files of a folder no entry was added to or
    removed from since (none of them is writable by the command: they cannot have grown),
    which are then not even looked at."""
    seen: set[tuple[int, int]] = set()
    total = 0
    marks = kept_marks or {}
    for root in folders:
        for directory, dirnames, filenames, folder in os.fwalk(str(root), follow_symlinks=False):
            mark = marks.get(directory)
            try:
                here = os.stat(".", dir_fd=folder, follow_symlinks=False)
            except OSError:
                continue
            files = () if mark is not None and here.st_ctime_ns == mark else filenames
            for name, info in (
                (".", here),
                *((name, None) for name in (*dirnames, *files)),
            ):
                if info is None:
                    try:
                        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
                    except OSError:
                        continue
                if mark is not None and info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
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

    def __init__(
        self,
        limits: LimitValues,
        *,
        watched: tuple[Path, ...],
        cgroups: bool = True,
        kept_marks: dict[str, int] | None = None,
    ) -> None:
        self.limits = limits
        self.watched = watched
        # The restored environments' folders as handed over (disk_usage need not look in).
        self.kept_marks = kept_marks
        self.use_cgroups = cgroups
        self.cgroup = CommandCgroup()
        self.process: LimitedProcess | None = None
        self.exceeded = ""
        self.disk_before = 0
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._gate_read: int | None = None
        self._gate_write: int | None = None

    # -- before the start

    def __enter__(self) -> CommandLimits:
        if self.use_cgroups:
            self.cgroup = CommandCgroup.make(
                cgroup_support(), memory_mb=self.limits.memory_mb, processes=self.limits.processes
            )
        if self.limits.disk_mb > 0:
            self.disk_before = disk_usage(self.watched, kept_marks=self.kept_marks)
        return self

    def gate_fd(self) -> int:
        """The read end of the pipe bwrap reads its options from (``--args``): it cannot
        fork before it has read them to the end, and they are written once it is in its
        cgroup."""
        if self._gate_read is None:
            self._gate_read, self._gate_write = os.pipe()
        return self._gate_read

    def _close_gate(self, *, read: bool = True, write: bool = True) -> None:
        # Each end closed once: a number closed twice may by then be another thread's file.
        if read and self._gate_read is not None:
            os.close(self._gate_read)
            self._gate_read = None
        if write and self._gate_write is not None:
            os.close(self._gate_write)
            self._gate_write = None

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
        if memory and not self.cgroup.holds("memory"):
            # 0: no address-space cap (Node reserves far more than it uses).
            options.append(f"--as={memory}")
        if not self.cgroup.holds("pids"):
            options.append(f"--nproc={limits.processes}")
        return [prlimit, *options, "--", *argv]

    # -- the start

    def start(self, process: LimitedProcess, *, gate: list[str] | None = None) -> None:
        """Put the started process in the command's cgroup, then let it go on (write
        ``gate``, its options, into the pipe); watch it from now on."""
        self.process = process
        self._close_gate(write=False)  # the child has its copy
        try:
            self.cgroup.join(process.pid)
        except OSError:
            # Killed before the pipe closes: bwrap never runs without its options.
            self._kill()
            process.wait()
            raise
        if self._gate_write is not None:
            data = bwrap_options(gate or [])
            with contextlib.suppress(BrokenPipeError):  # bwrap died: its exit status says why
                while data:
                    data = data[os.write(self._gate_write, data) :]
            self._close_gate()
        if self.cgroup.holds("memory") or self.limits.disk_mb > 0:
            self._watcher = threading.Thread(target=self._watch, name=f"sandbox-limits-{process.pid}", daemon=True)
            self._watcher.start()

    # -- while it runs

    def _over(self) -> str:
        if self.cgroup.oom_kills():
            return MEMORY_LIMIT_EXCEEDED.format(mb=self.limits.memory_mb)
        if self.limits.disk_mb > 0:
            added = disk_usage(self.watched, kept_marks=self.kept_marks) - self.disk_before
            if added > self.limits.disk_mb * 1024 * 1024:
                return DISK_LIMIT_EXCEEDED.format(mb=self.limits.disk_mb)
        return ""

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
        if self.process.poll() is None:  # a reaped process's group id may be another's now
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.cgroup.kill()

    # -- afterwards

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        if self._gate_write is not None and self.process is not None:  # started but never let go on
            self._kill()
            self.process.wait()
        self._close_gate()
        try:
            if self.process is not None:
                if not self.exceeded:
                    self.exceeded = self._over()
                self.process.limit_exceeded = self.exceeded
                if self.cgroup.forks_refused():
                    self.process.limit_notes = PROCESS_LIMIT_REACHED.format(count=self.limits.processes)
        finally:
            self.cgroup.remove()


def bwrap_options(arguments: list[str]) -> bytes:
    """bwrap's options as ``--args`` reads them: NUL-separated."""
    return b"".join(argument.encode() + b"\0" for argument in arguments)
