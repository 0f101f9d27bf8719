"""Cgroups for sandboxed commands: what this host offers, and one command's cgroup.

A command's memory and processes are limited as a whole by a cgroup made for it
(core/sandbox_limits.py joins bwrap to it before bwrap can fork): in cgroup v2 under the
worker's own cgroup where that one can hand the controllers down, or beside it (a leaf of
a cgroup delegated to the worker); else in the v1 ``memory`` and ``pids`` hierarchies,
under the worker's own. Whether it can be made is proven by making one
(:func:`cgroup_support`, cached a minute); where it cannot, the reason is kept for
``/healthz`` (no paths: the endpoint is public) and rlimits hold instead.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

DETECT_TTL_SECONDS = 60.0
CGROUP_PREFIX = "autocoder-sandbox-"
CONTROLLERS = ("memory", "pids")
NO_CGROUP_FILESYSTEM = "no cgroup filesystem is mounted"
CGROUP_REASON = "cannot make a cgroup for a command under the worker's own ({detail})"
V2_SPLIT = "cgroup v2: memory and pids are handed down at different levels of the worker's cgroups"
V2_NOT_DELEGATED = (
    "cgroup v2: neither the worker's cgroup nor the one above it hands {controller} to new children "
    "({detail}); run the worker in a leaf of a cgroup delegated to it (README, 'The sandbox')"
)


@dataclass(frozen=True)
class CgroupParent:
    """The cgroup under which a command's cgroup is made, for one controller."""

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
    is made (cgroup v2 first: under the worker's own cgroup, or beside it; else v1,
    under the worker's own); why not for the others. Proven by making (and removing)
    one."""
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
            if version == 2 and folder != Path(mount.point):
                # v2 lets no cgroup both hold processes and hand controllers down: where
                # the worker's is a leaf of a cgroup delegated to it (systemd's
                # DelegateSubgroup=), commands' cgroups go beside it.
                candidates.append(CgroupParent(version, folder.parent))
        if not candidates:
            reasons[controller] = NO_CGROUP_FILESYSTEM if not mounts else f"no cgroup hierarchy offers {controller}"
            continue
        for candidate in sorted(candidates, key=lambda c: -c.version):  # v2 first
            if candidate.version == 2:
                try:
                    _v2_enable(candidate.path, controller)  # EBUSY where it holds processes
                except OSError as exc:
                    reasons[controller] = V2_NOT_DELEGATED.format(controller=controller, detail=_error(exc))
                    continue
            try:
                if try_child:
                    _try_child(candidate.path, _probe_files(controller, candidate.version))
            except OSError as exc:
                reasons[controller] = CGROUP_REASON.format(detail=f"cgroup v{candidate.version}: {_error(exc)}")
                continue
            parents[controller] = candidate
            reasons.pop(controller, None)
            break
    memory, pids = parents.get("memory"), parents.get("pids")
    if memory and pids and memory.version == pids.version == 2 and memory.path != pids.path:
        # A process is in one v2 cgroup only: both limits must be on the same one.
        del parents["pids"]
        reasons["pids"] = V2_SPLIT
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
        if support.reasons and (_detected is None or _detected[1].reasons != support.reasons):
            logger.warning("Sandboxed commands fall back to rlimits for %s", support.reasons)
        _detected = (time.monotonic(), support)
        return support


# --- One command's cgroup ---------------------------------------------------------------


@dataclass
class CommandCgroup:
    """The cgroup of one command: a folder per v1 controller, or one folder (v2)."""

    controller_dirs: dict[str, Path] = field(default_factory=dict)

    @property
    def dirs(self) -> list[Path]:
        return list(dict.fromkeys(self.controller_dirs.values()))

    def holds(self, controller: str) -> bool:
        return controller in self.controller_dirs

    @classmethod
    def make(cls, support: CgroupSupport, *, memory_mb: int, processes: int) -> CommandCgroup:
        """A new cgroup with these limits (0: that controller is not used)."""
        name = f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        cgroup = cls()
        try:
            for controller, amount in (("memory", memory_mb), ("pids", processes)):
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
            cgroup.remove()
            raise
        return cgroup

    def join(self, pid: int) -> None:
        for folder in self.dirs:
            (folder / "cgroup.procs").write_text(str(pid))

    def kill(self) -> None:
        for folder in self.dirs:
            with contextlib.suppress(OSError):  # v2 since Linux 5.14
                (folder / "cgroup.kill").write_text("1")
            for pid in _members(folder):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Kill whatever is left in it (nothing, normally: bwrap's PID namespace went
        with bwrap), then remove it."""
        for folder in self.dirs:
            for _ in range(100):
                if not folder.exists():
                    break
                if not _members(folder):
                    try:
                        folder.rmdir()
                        break
                    except OSError as exc:
                        if exc.errno != errno.EBUSY:
                            logger.warning("Could not remove the command's cgroup %s: %s", folder, exc)
                            break
                self.kill()
                time.sleep(0.05)
            else:
                logger.warning("The command's cgroup %s is still busy; left behind", folder)

    def oom_kills(self) -> int:
        """Processes the kernel killed for the cgroup's memory limit."""
        folder = self.controller_dirs.get("memory")
        if folder is None:
            return 0
        if (folder / "memory.events").exists():
            return _count(folder, "memory.events", "oom_kill")
        return _count(folder, "memory.oom_control", "oom_kill")

    def forks_refused(self) -> int:
        """Forks refused for the cgroup's process limit."""
        folder = self.controller_dirs.get("pids")
        return 0 if folder is None else _count(folder, "pids.events", "max")


def _members(folder: Path) -> list[int]:
    try:
        return [int(line) for line in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


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
