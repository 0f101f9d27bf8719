"""The test processes' scratch folders: one per process, all under one base of the suite's
own in the system's temporary folder (``autocoder-test-<uid>``).

A process removes its folder when it exits; one that was killed cannot, so every process
that makes one first removes those whose process is gone. A folder's name starts with its
process's id and start time, so that a later process given the same id does not keep a
dead one's folder alive.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

_folders: dict[int, Path] = {}


def scratch_base(temp_root: Path | None = None) -> Path:
    """The suite's base folder, made if missing. Its name is predictable in a folder
    everyone may write, so it must be a real folder of this user's, not a link."""
    base = Path(temp_root or tempfile.gettempdir()) / f"autocoder-test-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o711)
    found = base.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise RuntimeError(f"{base} is not a folder of this user's: remove it, or set TMPDIR elsewhere")
    # Searchable, not listable, by the sandbox's accounts (mkdir's mode passed through umask).
    base.chmod(0o711)
    return base


def process_started(pid: int) -> str | None:
    """When the process started (clock ticks since boot), or None if there is none."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        # No /proc (macOS): that some process has the id is all there is to know.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "running"
    except OSError:
        return "unknown"
    # Field 22 of the line; the command name (field 2) may hold spaces and parentheses.
    return line.rsplit(")", 1)[1].split()[19]


def stale_folders_remove(base: Path) -> list[Path]:
    """Remove the folders under ``base`` whose process has exited; return them."""
    removed = []
    for folder in base.iterdir():
        pid, _, rest = folder.name.partition("-")
        started = rest.partition("-")[0]
        if not pid.isdigit() or not started or process_started(int(pid)) in (started, "unknown"):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


# A worker process a test starts (tests/workers.py subprocess_env) shares its test
# process's folder: a worker killed mid-phase leaves its worktree for the worker that
# resumes the run, as a killed process on a real machine does. The test process removes it.
SHARED_FOLDER_VARIABLE = "AUTOCODER_TEST_SCRATCH"


def process_scratch_folder(temp_root: Path | None = None) -> Path:
    """This process's folder (the same on every call), removed when it exits; for a
    process started by a test's process, that process's folder."""
    pid = os.getpid()
    shared = os.environ.get(SHARED_FOLDER_VARIABLE, "")
    if pid not in _folders and shared and Path(shared).is_dir():
        _folders[pid] = Path(shared)
    if pid not in _folders:
        base = scratch_base(temp_root)
        stale_folders_remove(base)
        folder = Path(tempfile.mkdtemp(prefix=f"{pid}-{process_started(pid)}-", dir=base))
        folder.chmod(0o711)
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _folders[pid] = folder
    return _folders[pid]
