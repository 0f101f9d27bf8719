"""Can a sandbox be made here? The sandbox fails closed: :func:`sandbox_status` probes
that one can be made (bwrap installed, namespaces allowed, the folders of worktrees and
repositories reachable by the sandbox's accounts) by starting one, and nothing — no git
command, no test command — starts when it cannot. ``UNSAFE_RUN_TESTS_WITHOUT_SANDBOX``
is the operator's explicit way out.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.exceptions import SandboxUnavailable
from core.sandbox_accounts import SANDBOX_UNAVAILABLE, SETPRIV_MISSING, as_account, storage_ids
from core.sandbox_bwrap import bwrap_arguments, bwrap_path
from core.sandbox_handover import workspace_prepared
from core.sandbox_limits import bwrap_options

PROBE_TTL_SECONDS = 60.0
_ABSOLUTE_PATH = re.compile(r"/[^\s:'\"]+")
BWRAP_MISSING = "bwrap (bubblewrap) is not installed or SANDBOX_BWRAP does not name it."
PROBE_FAILED = "bwrap could not start a sandbox ({detail})."
PROBE_TIMED_OUT = "bwrap did not start a sandbox within 10 s."
WORKTREES_UNREACHABLE = (
    "the sandbox's accounts (SANDBOX_UID {uid} and the pool from SANDBOX_UID_POOL_START) cannot reach {setting}: "
    "every folder above it must be searchable by them (chmod o+x)."
)


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


_probe_lock = threading.Lock()
_probe_cache: dict[tuple[str, int, int], tuple[float, SandboxStatus]] = {}


def sandbox_status(*, refresh: bool = False) -> SandboxStatus:
    """Whether commands can run sandboxed here; probed by starting one, cached a minute."""
    if settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX:
        return SandboxStatus(available=True, disabled=True, reason="disabled by UNSAFE_RUN_TESTS_WITHOUT_SANDBOX")
    bwrap = bwrap_path()
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
        with workspace_prepared(workspace) as (support, ids, _):
            # The options through --args, as for every command: a bwrap without it fails here.
            read_end, write_end = os.pipe()
            with open(write_end, "wb") as options:  # a few KB: the pipe holds them
                options.write(bwrap_options(bwrap_arguments(workspace, support, 16)))
            try:
                argv = [bwrap, "--args", str(read_end), "/bin/sh", "-c", "test -w /workspace"]
                result = subprocess.run(  # noqa: S603 - a fixed argument list
                    [*as_account(ids), *argv],
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
