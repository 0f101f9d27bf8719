"""A suggested setup script and test command for a repository's checkout, from the files
it keeps: the person linking it accepts or edits them.

Only reads. Nothing of the checkout runs; a file is read only when it is a regular file
inside the folder (a link is followed only while it stays inside and out of ``.git``:
``repos.paths.resolve_in_worktree``), at most
``MAX_FILE_BYTES``; folders are listed only so far (``MAX_LISTED_ENTRIES``). A file that
cannot be read or parsed (bad TOML or JSON, too large, not text) is a reason "could not
read …", never an exception.

The rules, each ecosystem adding its setup lines (in this order) and, perhaps, a test
command:

- **Python.** ``uv.lock``: ``uv sync --frozen``. ``poetry.lock``: ``poetry install
  --no-interaction`` (with the environment in the project, ``.venv``). Otherwise
  ``requirements*.txt`` / ``pyproject.toml`` / ``setup.py``: ``python3 -m venv .venv``, then
  ``.venv/bin/pip install -r requirements.txt`` (and any requirements file naming dev or
  test) and ``.venv/bin/pip install -e '.[test]'`` (the first of the extras test, tests,
  testing, dev that exists; ``-e .`` without). The test command is ``pytest -q`` when
  pytest is a dependency (any requirements file, the project's dependencies, extras or
  dependency groups, poetry's groups), pytest is configured (``pytest.ini``,
  ``[tool.pytest.ini_options]``, ``[pytest]`` in tox.ini, ``[tool:pytest]`` in setup.cfg,
  ``conftest.py``) or ``tests/`` holds a ``test_*.py``; a venv then installs pytest too when
  nothing else names it. ``tox.ini`` and ``noxfile.py`` are mentioned, not used.
  (The sandbox puts the checkout's ``.venv/bin`` first on PATH, so ``pytest`` is that one.)
- **Node.** ``package.json``; its lockfile decides: ``package-lock.json`` ``npm ci``,
  ``yarn.lock`` ``yarn install --frozen-lockfile``, ``pnpm-lock.yaml`` ``pnpm install
  --frozen-lockfile``, none ``npm install``. The test command is ``npm test`` (``yarn
  test``, ``pnpm test``) when ``scripts.test`` exists and is not npm's default "no test
  specified".
- **Make.** A ``Makefile`` (``makefile``, ``GNUmakefile``) with a ``test:`` target: ``make test``.
- **Go.** ``go.mod``: ``go mod download``, ``go test ./...``.
- **Rust.** ``Cargo.toml``: ``cargo fetch``, ``cargo test``.

The test command, when several are found, is the first of: ``make test`` (the project's
own entry point), Python, Node, Go, Rust. Nothing recognised: empty strings and a reason
saying so.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .paths import PathRefused, resolve_in_worktree

MAX_FILE_BYTES = 256 * 1024
MAX_LISTED_ENTRIES = 1000
TESTS_SEARCH_DEPTH = 3

NOTHING_RECOGNISED = (
    "Nothing recognised: no pyproject.toml, requirements*.txt, package.json, Makefile test target, go.mod or "
    "Cargo.toml."
)
NPM_DEFAULT_TEST = "no test specified"
PYTHON_EXTRAS = ("test", "tests", "testing", "dev")
LINK_REFUSED = "{name} points outside the folder or into .git: not read."


@dataclass
class Suggestion:
    setup_script: str = ""
    test_command: str = ""
    reasons: list[str] = field(default_factory=list)


def repository_suggest(*, path: Path) -> Suggestion:
    """The suggestion for the checkout at ``path``. Never raises for what the folder
    holds; a missing folder suggests nothing."""
    checkout = _Checkout(path)
    setup: list[str] = []
    # (priority, command): the lowest priority wins.
    tests: list[tuple[int, str]] = []
    for priority, ecosystem in enumerate((_make, _python, _node, _go, _rust)):
        lines, command = ecosystem(checkout)
        setup.extend(lines)
        if command:
            tests.append((priority, command))
    if not setup and not tests:
        checkout.reasons.append(NOTHING_RECOGNISED)
    return Suggestion(
        setup_script="\n".join(setup),
        test_command=min(tests)[1] if tests else "",
        reasons=list(dict.fromkeys(checkout.reasons)),  # a file looked at twice, said once
    )


class _Unreadable(Exception):
    pass


class _Checkout:
    """The checkout's files as the rules see them: only inside the folder, bounded."""

    def __init__(self, path: Path) -> None:
        try:
            self.root: Path | None = path.resolve(strict=True)
        except (OSError, RuntimeError):
            self.root = None
        if self.root is not None and not self.root.is_dir():
            self.root = None
        self.reasons: list[str] = []

    def _inside(self, name: str) -> Path | None:
        """The resolved path of ``name`` when it exists and stays inside the folder."""
        if self.root is None:
            return None
        try:
            resolved, _ = resolve_in_worktree(self.root, name)
        except PathRefused:
            self.reasons.append(LINK_REFUSED.format(name=name))
            return None
        return resolved if os.path.lexists(resolved) else None

    def has_file(self, name: str) -> bool:
        resolved = self._inside(name)
        try:
            return resolved is not None and stat.S_ISREG(resolved.stat().st_mode)
        except OSError:
            return False

    def read(self, name: str) -> str | None:
        """The text of ``name``; None when it is not there. Raises _Unreadable (with the
        reason recorded) when it is there but cannot be read."""
        resolved = self._inside(name)
        if resolved is None:
            return None
        try:
            # Non-blocking: a FIFO planted in the checkout must not hang the page.
            fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return self._unreadable(name, "cannot be opened")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            with os.fdopen(fd, "rb", closefd=False) as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except OSError:
            return self._unreadable(name, "cannot be read")
        finally:
            os.close(fd)
        if len(data) > MAX_FILE_BYTES:
            return self._unreadable(name, f"is larger than {MAX_FILE_BYTES // 1024} KB")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return self._unreadable(name, "is not UTF-8 text")

    def _unreadable(self, name: str, why: str) -> str:
        self.reasons.append(f"Could not read {name}: it {why}.")
        raise _Unreadable(name)

    def read_or_none(self, name: str) -> str | None:
        try:
            return self.read(name)
        except _Unreadable:
            return None

    def names(self, folder: str = "") -> list[str]:
        """Names in ``folder`` (inside the checkout), at most MAX_LISTED_ENTRIES."""
        resolved = self._inside(folder) if folder else self.root
        if resolved is None:
            return []
        found: list[str] = []
        try:
            with os.scandir(resolved) as entries:
                for entry in entries:
                    if len(found) >= MAX_LISTED_ENTRIES:
                        break
                    found.append(entry.name)
        except OSError:
            return []
        return sorted(found)

    def has_test_module(self, folder: str) -> bool:
        """Whether ``folder`` holds a test_*.py or *_test.py within a few levels; links to
        folders are not followed, and at most MAX_LISTED_ENTRIES entries are looked at."""
        start = self._inside(folder)
        if start is None or not start.is_dir():
            return False
        pending = [(start, 0)]
        seen = 0
        while pending:
            current, depth = pending.pop()
            try:
                with os.scandir(current) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > MAX_LISTED_ENTRIES:
                            return False
                        if entry.is_file(follow_symlinks=False) and _is_test_module(entry.name):
                            return True
                        if depth + 1 < TESTS_SEARCH_DEPTH and entry.is_dir(follow_symlinks=False):
                            pending.append((Path(entry.path), depth + 1))
            except OSError:
                continue
        return False


def _is_test_module(name: str) -> bool:
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _toml(checkout: _Checkout, name: str) -> dict[str, Any] | None:
    try:
        text = checkout.read(name)
    except _Unreadable:
        return None
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):  # RecursionError: nested too deep
        checkout.reasons.append(f"Could not read {name}: it is not valid TOML.")
        return None


_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _requirement_names(lines: Iterable[object]) -> set[str]:
    names = set()
    for line in lines:
        if isinstance(line, str) and (match := _REQUIREMENT_NAME.match(line)):
            names.add(re.sub(r"[-_.]+", "-", match.group(1)).lower())
    return names


def _names_pytest(names: set[str]) -> bool:
    return any(name == "pytest" or name.startswith("pytest-") for name in names)


def _table(data: object, *keys: str) -> dict[str, Any]:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _pyproject_dependencies(pyproject: dict[str, Any]) -> tuple[set[str], list[str]]:
    """The names of every dependency pyproject.toml lists (any group) and its extras."""
    project = _table(pyproject, "project")
    extras = _table(project, "optional-dependencies")
    lines: list[object] = [*_list(project.get("dependencies"))]
    for group in extras.values():
        lines.extend(_list(group))
    for group in _table(pyproject, "dependency-groups").values():
        lines.extend(_list(group))
    poetry = _table(pyproject, "tool", "poetry")
    names = _requirement_names(lines)
    poetry_tables = [_table(poetry, "dependencies"), _table(poetry, "dev-dependencies")]
    poetry_tables += [_table(group, "dependencies") for group in _table(poetry, "group").values()]
    names |= _requirement_names(name for table in poetry_tables for name in table)
    return names, [str(name) for name in extras]


def _python(checkout: _Checkout) -> tuple[list[str], str]:
    root_names = checkout.names()
    requirements = [
        name
        for name in root_names
        if name.startswith("requirements") and name.endswith(".txt") and checkout.has_file(name)
    ]
    has_pyproject = checkout.has_file("pyproject.toml")
    has_setup_py = checkout.has_file("setup.py")
    uv_lock = checkout.has_file("uv.lock")
    poetry_lock = checkout.has_file("poetry.lock")
    if not (requirements or has_pyproject or has_setup_py or uv_lock or poetry_lock):
        return [], ""

    dependencies: set[str] = set()
    extras: list[str] = []
    pyproject = _toml(checkout, "pyproject.toml") if has_pyproject else None
    installable = has_setup_py
    pytest_configured = False
    if pyproject is not None:
        dependencies, extras = _pyproject_dependencies(pyproject)
        installable = installable or bool(_table(pyproject, "project") or _table(pyproject, "build-system"))
        pytest_configured = bool(_table(pyproject, "tool", "pytest"))
    for name in requirements:
        text = checkout.read_or_none(name)
        if text is not None:
            dependencies |= _requirement_names(text.splitlines())

    # pytest configured elsewhere
    if checkout.has_file("pytest.ini") or checkout.has_file("conftest.py"):
        pytest_configured = True
    for name, section in (("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]")):
        text = checkout.read_or_none(name) if checkout.has_file(name) else None
        if text is not None and section in text:
            pytest_configured = True
    tests_found = checkout.has_test_module("tests") or checkout.has_test_module("test")
    pytest_named = _names_pytest(dependencies)
    uses_pytest = pytest_named or pytest_configured or tests_found
    test_command = "pytest -q" if uses_pytest else ""
    why_pytest = (
        "pytest is a dependency"
        if pytest_named
        else "pytest is configured"
        if pytest_configured
        else "tests/ holds test modules"
        if tests_found
        else "no pytest found"
    )

    if uv_lock:
        setup = ["uv sync --frozen"]
        checkout.reasons.append(f"uv.lock: uv sync --frozen; {why_pytest}" + (": pytest -q." if uses_pytest else "."))
    elif poetry_lock:
        setup = ["POETRY_VIRTUALENVS_IN_PROJECT=true poetry install --no-interaction"]
        checkout.reasons.append(
            f"poetry.lock: poetry install --no-interaction; {why_pytest}" + (": pytest -q." if uses_pytest else ".")
        )
    else:
        setup = ["python3 -m venv .venv"]
        chosen = [name for name in requirements if name == "requirements.txt" or re.search(r"dev|test", name)]
        chosen = sorted(chosen or requirements, key=lambda name: (name != "requirements.txt", name))
        if chosen:
            setup.append(".venv/bin/pip install " + " ".join(f"-r {name}" for name in chosen))
            checkout.reasons.append(f"{', '.join(chosen)}: pip install -r into a venv.")
        if installable:
            extra = next((name for name in PYTHON_EXTRAS if name in extras), "")
            target = f"'.[{extra}]'" if extra else "."
            setup.append(f".venv/bin/pip install -e {target}")
            source = "pyproject.toml" if pyproject is not None and not has_setup_py else "setup.py"
            checkout.reasons.append(
                f"{source}: an installable project: pip install -e {target}"
                + (f" (its {extra} extra)." if extra else "")
            )
        if uses_pytest and not pytest_named:
            setup.append(".venv/bin/pip install pytest")
        checkout.reasons.append(f"Python: {why_pytest}" + (": pytest -q." if uses_pytest else "; no test command."))
    if len(setup) == 1 and setup[0] == "python3 -m venv .venv":
        setup = []  # nothing to install into it
    for name, tool in (("tox.ini", "tox"), ("noxfile.py", "nox")):
        if checkout.has_file(name):
            checkout.reasons.append(f"{name}: {tool} sessions exist (not run; pytest is run directly).")
    return setup, test_command


_NODE_LOCKFILES = (
    ("package-lock.json", "npm ci", "npm test"),
    ("yarn.lock", "yarn install --frozen-lockfile", "yarn test"),
    ("pnpm-lock.yaml", "pnpm install --frozen-lockfile", "pnpm test"),
)


def _node(checkout: _Checkout) -> tuple[list[str], str]:
    if not checkout.has_file("package.json"):
        return [], ""
    try:
        package = json.loads(checkout.read("package.json") or "")
    except _Unreadable:
        return [], ""
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        checkout.reasons.append("Could not read package.json: it is not valid JSON.")
        return [], ""
    lockfile, install, test = next(
        (entry for entry in _NODE_LOCKFILES if checkout.has_file(entry[0])), ("", "npm install", "npm test")
    )
    script = _table(package, "scripts").get("test")
    has_test = isinstance(script, str) and script.strip() != "" and NPM_DEFAULT_TEST not in script
    test_part = f"a test script: {test}" if has_test else "no test script"
    checkout.reasons.append(
        f"package.json has {test_part}; " + (f"{lockfile}: {install}." if lockfile else f"no lockfile: {install}.")
    )
    return [install], test if has_test else ""


_MAKE_TEST_TARGET = re.compile(r"^test\s*:(?![=:]?=)", re.MULTILINE)


def _make(checkout: _Checkout) -> tuple[list[str], str]:
    for name in ("GNUmakefile", "makefile", "Makefile"):
        if not checkout.has_file(name):
            continue
        text = checkout.read_or_none(name)
        if text is not None and _MAKE_TEST_TARGET.search(text):
            checkout.reasons.append(f"{name} has a test target: make test.")
            return [], "make test"
        return [], ""
    return [], ""


def _go(checkout: _Checkout) -> tuple[list[str], str]:
    if not checkout.has_file("go.mod"):
        return [], ""
    text = checkout.read_or_none("go.mod")
    if text is None:
        return [], ""
    if not re.search(r"^\s*module\s+\S", text, re.MULTILINE):
        checkout.reasons.append("Could not read go.mod: it names no module.")
        return [], ""
    checkout.reasons.append("go.mod: go mod download, go test ./...")
    return ["go mod download"], "go test ./..."


def _rust(checkout: _Checkout) -> tuple[list[str], str]:
    if not checkout.has_file("Cargo.toml") or _toml(checkout, "Cargo.toml") is None:
        return [], ""
    checkout.reasons.append("Cargo.toml: cargo fetch, cargo test.")
    return ["cargo fetch"], "cargo test"
