"""Where the tests' real Claude Code CLI runs from: the pinned npm package
(tools/claude-cli, ``npm ci --prefix tools/claude-cli``; `make install` and .ci/run do it).

The sandbox runs it as another user, who must reach its folder: a clone in a folder only
its owner may enter (`mktemp -d` makes one 0700, as CI's is) hides tools/ from that user.
So it is linked (or, across filesystems, copied: ~400 MB) where that user reaches it
(tests/readable.py). A missing install fails the tests that need it with
the command that installs it: they are the provider's tests against the real program.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tests.readable import readable

PACKAGE = Path(__file__).resolve().parent.parent / "tools" / "claude-cli"
SOURCE = PACKAGE / "node_modules" / ".bin" / "claude"
NOT_INSTALLED = f"The pinned Claude CLI is not installed: run `npm ci --prefix {PACKAGE}` (or `make install`)."


@functools.cache
def real_claude() -> str:
    if not SOURCE.exists():
        raise RuntimeError(NOT_INSTALLED)
    executable = readable(SOURCE.resolve())
    executable.chmod(0o755)
    return str(executable)
