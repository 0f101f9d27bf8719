"""Where the tests' fake `claude` CLI (tests/bin/claude) runs from.

The sandbox runs it as another user, who must reach its folder: a clone in a folder only
its owner may enter (`mktemp -d` makes one 0700, as CI's is) hides tests/bin from that
user. So it is copied once per process to a folder anyone may enter, removed at exit.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "bin" / "claude"


@functools.cache
def fake_claude() -> str:
    folder = Path(tempfile.mkdtemp(prefix="autocoder-fake-claude-"))
    folder.chmod(0o755)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    executable = folder / "claude"
    shutil.copy2(SOURCE, executable)
    executable.chmod(0o755)
    return str(executable)
