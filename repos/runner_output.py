"""What a test command's output says: which tests failed (pytest, unittest and Django's
runner, TAP — node's ``--test``, uvu, tape —, Jest and Vitest, Go, cargo), and whether
the command could not start at all (a broken environment, not failing code)."""

from __future__ import annotations

import re
from collections.abc import Callable

MAX_FAILING_TESTS = 500

_FAILING_PATTERNS = (
    # pytest's short summary: "FAILED tests/test_a.py::test_b - AssertionError"
    re.compile(r"^(?:FAILED|ERROR) (?P<id>\S+::\S+|\S+\.py)(?: - .*)?$"),
    # unittest / Django: "FAIL: test_b (app.tests.TestA.test_b)"
    re.compile(r"^(?:FAIL|ERROR): (?P<id>\S+ \([^)]+\))"),
    # TAP: "not ok 3 - adds numbers"
    re.compile(r"^\s*not ok \d+(?: -)? (?P<id>.+?)(?:\s+#.*)?$"),
    # Go: "--- FAIL: TestAdd (0.00s)"
    re.compile(r"^\s*--- FAIL: (?P<id>\S+)"),
    # cargo: "test tests::adds ... FAILED"
    re.compile(r"^test (?P<id>\S+) \.\.\. FAILED$"),
    # Jest / Vitest: "  ✕ adds numbers (3 ms)", "  × adds numbers"
    re.compile(r"^\s*[✕×] (?P<id>.+?)(?: \(\d+(?:\.\d+)? ?m?s\))?$"),
    # uvu: "  FAIL  math  \"adds numbers\""
    re.compile(r"^\s*FAIL\s+(?P<id>\S+\s+\".+\")"),
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# Signs that the test command itself could not start (exit 126/127, an interpreter,
# a test runner or an imported package missing): the environment is broken.
_CANNOT_START = (
    # `python -m pytest` without pytest: the interpreter's own words, whatever the exit.
    (re.compile(r"(?:^|\n)\S*python[\d.]*: No module named ([\w.]+)"), "the Python module {0} is not installed"),
    (re.compile(r"No module named '?([\w.]+)'?"), "the Python module {0} is not installed"),
    (re.compile(r"Cannot find module '([^']+)'"), "the Node module {0} is not installed"),
    (
        re.compile(r"(?:^|\n)(?:sh|bash|/bin/sh)(?:: \d+)?: (?:line \d+: )?([^\s:]+): (?:command )?not found"),
        "{0} is not installed",
    ),
    (re.compile(r"(?:^|\n)(\S+): command not found"), "{0} is not installed"),
    (re.compile(r"env: '?([^':\s]+)'?: No such file or directory"), "{0} is not installed"),
)
# Exit codes of test runners that mean "could not collect or import" rather than "tests
# failed": pytest's 2 (interrupted, e.g. an import error while collecting), 3, 4.
_RUNNER_COULD_NOT_RUN = {2, 3, 4}


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (pytest's ``--color=yes``, Jest's)."""
    return _ANSI.sub("", text)


def failing_tests(output: str) -> list[str]:
    """The ids of the tests the output names as failing, in order, once each."""
    found: dict[str, None] = {}
    for raw in output.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        for pattern in _FAILING_PATTERNS:
            match = pattern.match(line)
            if match:
                found.setdefault(match["id"].strip(), None)
                break
        if len(found) >= MAX_FAILING_TESTS:
            break
    return list(found)


def _top_level(missing: str) -> str:
    """The file or folder a missing module would be at the top of a repository:
    ``src`` for ``src.inventory``, ``lib`` for ``./lib/util.js``."""
    if missing.startswith(("./", "../", "/")):
        return missing.lstrip("./").split("/", 1)[0]
    return missing.split(".", 1)[0].split("/", 1)[0]


def cannot_start_reason(*, exit_code: int | None, output: str, own: Callable[[str], bool] | None = None) -> str:
    """Why the test command could not run the tests at all, or "" when it ran them (they
    may have failed: that is the code's business).

    ``own(name)`` says whether the repository itself holds a top-level file or folder of
    that name (``name`` or ``name.py``): a module of the repository's own that is
    missing ("No module named 'src.inventory'" once src/inventory.py was removed) is the
    code failing its tests, not the environment."""
    if exit_code in (None, 0):
        return ""
    tail = _ANSI.sub("", output[-20_000:])
    for pattern, _reason in _CANNOT_START[:3]:
        for missing in pattern.finditer(tail):
            if own is not None and own(_top_level(missing.group(1))):
                return ""
    for pattern, reason in _CANNOT_START:
        match = pattern.search(tail)
        decisive = pattern is _CANNOT_START[0][0]
        if match and (decisive or exit_code in (126, 127) or exit_code in _RUNNER_COULD_NOT_RUN or "Error" in tail):
            return reason.format(match.group(1))
    if exit_code == 127:
        return "a program it runs is not installed (exit 127)"
    if exit_code == 126:
        return "a program it runs cannot be executed (exit 126)"
    return ""
