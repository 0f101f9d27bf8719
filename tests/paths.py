"""Test folders the sandbox's account can reach.

When the suite runs as root, test commands run in bubblewrap started as an unprivileged
account (core/sandbox.py), which must be able to search down to the worktree it binds.
pytest makes its temporary folders private (0700); these open them for searching only
(o+x, no listing).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def searchable_by_sandbox(path: Path) -> Path:
    """Add o+x to ``path`` and to its parents inside the system's temporary folder."""
    temp_root = Path(tempfile.gettempdir()).resolve()
    resolved = path.resolve()
    for folder in [resolved, *resolved.parents]:
        if folder == temp_root or temp_root not in folder.parents:
            break
        mode = stat.S_IMODE(folder.stat().st_mode)
        if folder.stat().st_uid == os.geteuid() and not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
    return path
