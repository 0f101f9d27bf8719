"""What the sandbox's user must reach in the tests: the real programs the tests run (the
pinned Claude CLI, the ACP agents) and the fake ones (tests/fake_acp_agent.py).

The sandbox runs them as another user, who must be able to enter every folder above them:
a clone in a folder only its owner may enter (`mktemp -d` makes one 0700, as CI's is)
hides them. Such a file or folder is then hard-linked (or, across filesystems, copied)
once per process into a folder anyone may enter, removed at exit; one the user already
reaches is used where it is.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def others_may_reach(path: Path) -> bool:
    """Whether a user other than the owner may enter every folder down to ``path``."""
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in path.resolve().parents)


@functools.cache
def readable(source: Path) -> Path:
    """``source`` (a file or a folder), or a linked copy of it, where the sandbox's user
    reaches it."""
    source = source.resolve()
    if others_may_reach(source):
        return source
    folder = Path(tempfile.mkdtemp(prefix="autocoder-readable-"))
    folder.chmod(0o755)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    target = folder / source.name
    if source.is_dir():
        linked = subprocess.run(["cp", "-al", str(source), str(target)], capture_output=True)
        if linked.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, symlinks=True)
        return target
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return target


def acp_agents_reachable(agents: dict[str, dict[str, Any]], root: str) -> dict[str, dict[str, Any]]:
    """settings.ACP_AGENTS with the agents' install folder ``root`` (ACP_AGENTS_ROOT)
    where the sandbox's user reaches it."""
    if not Path(root).exists():
        return agents  # not installed: the tests that need them say so
    moved = str(readable(Path(root)))

    def swap(value: Any) -> Any:
        return value.replace(root, moved) if isinstance(value, str) else value

    return {
        name: {
            **entry,
            "command": [swap(part) for part in entry.get("command", [])],
            "env": {key: swap(value) for key, value in entry.get("env", {}).items()},
            "paths": [swap(path) for path in entry.get("paths", [])],
        }
        for name, entry in agents.items()
    }
