"""Read-only tools the agents use to explore a run's worktree before they answer:
``list_files``, ``read_file`` and ``search_code``. Confined to the worktree (no absolute
paths, no ``..``, no symlinks leading out, nothing in ``.git``), output capped, and
never raising for bad input: a problem is an error result the model can act on."""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm.providers.base import Tool

from .git import GitAccess, GitError, GitTimedOut, run_git
from .paths import PathRefused, resolve_in_worktree

MAX_LIST_ENTRIES = 500
MAX_SEARCH_MATCHES = 200
MAX_LINE_CHARS = 400
SEARCH_TIMEOUT_SECONDS = 10
BINARY_SNIFF_BYTES = 8000

LIST_FILES = Tool(
    name="list_files",
    description=(
        "List the entries of a folder of the repository (folders end with /, files show their size). "
        f"At most {MAX_LIST_ENTRIES} entries. path is relative to the repository root; '.' is the root."
    ),
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string", "description": "Folder, relative to the repository root."}},
    },
)
READ_FILE = Tool(
    name="read_file",
    description=(
        "Read a text file of the repository, with line numbers. Give start and end (1-based, inclusive) "
        "to read part of a long file; long output is cut and says how to read the rest."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File, relative to the repository root."},
            "start": {"type": "integer", "minimum": 1},
            "end": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
    },
)
SEARCH_CODE = Tool(
    name="search_code",
    description=(
        "Search the repository's text files (tracked, and untracked ones git does not ignore) for a "
        "regular expression (POSIX extended), or for plain text with fixed_string. "
        f"Answers lines as path:line: text, at most {MAX_SEARCH_MATCHES} matches. "
        "path limits the search to a folder or file."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression, e.g. def add\\("},
            "path": {"type": "string", "description": "Folder or file to search in (default: everything)."},
            "fixed_string": {"type": "boolean", "description": "Match pattern as plain text, not a regex."},
        },
        "required": ["pattern"],
    },
)
REPO_TOOLS = (LIST_FILES, READ_FILE, SEARCH_CODE)


@dataclass
class ToolOutput:
    text: str
    is_error: bool = False


_Refused = PathRefused


def _resolve(worktree: Path, raw: Any, *, default: str = ".") -> tuple[Path, str]:
    """The real path inside the worktree for ``raw``, and its display form."""
    return resolve_in_worktree(worktree, raw, default=default)


def _cap(text: str, max_chars: int, hint: str) -> str:
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars].rsplit("\n", 1)[0]
    return f"{cut}\n[… output cut at {max_chars} characters. {hint}]"


def _list_files(worktree: Path, tool_input: dict[str, Any], max_chars: int) -> ToolOutput:
    folder, shown = _resolve(worktree, tool_input.get("path"))
    if not folder.exists():
        return ToolOutput(f"{shown} does not exist.", is_error=True)
    if not folder.is_dir():
        return ToolOutput(f"{shown} is a file; use read_file to read it.", is_error=True)
    entries = sorted(os.scandir(folder), key=lambda entry: (not entry.is_dir(follow_symlinks=False), entry.name))
    lines = []
    for entry in entries:
        if entry.name == ".git":
            continue
        if entry.is_dir(follow_symlinks=False):
            lines.append(f"{entry.name}/")
        elif entry.is_symlink():
            lines.append(f"{entry.name} -> (symbolic link)")
        else:
            lines.append(f"{entry.name} ({entry.stat(follow_symlinks=False).st_size} bytes)")
    more = len(lines) - MAX_LIST_ENTRIES
    lines = lines[:MAX_LIST_ENTRIES] + ([f"[… {more} more entries]"] if more > 0 else [])
    header = f"{shown}/" if shown != "." else "./"
    return ToolOutput(
        _cap("\n".join([header, *lines]) if lines else f"{header}\n(empty)", max_chars, "List a subfolder.")
    )


def _read_file(worktree: Path, tool_input: dict[str, Any], max_chars: int) -> ToolOutput:
    if "path" not in tool_input:
        return ToolOutput("read_file needs a path.", is_error=True)
    path, shown = _resolve(worktree, tool_input.get("path"))
    if not path.exists():
        return ToolOutput(f"{shown} does not exist. Use list_files to see what is there.", is_error=True)
    if path.is_dir():
        return ToolOutput(f"{shown} is a folder; use list_files.", is_error=True)
    start, end = tool_input.get("start"), tool_input.get("end")
    for name, value in (("start", start), ("end", end)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return ToolOutput(f"{name} must be a whole number from 1.", is_error=True)
    with path.open("rb") as handle:
        if b"\x00" in handle.read(BINARY_SNIFF_BYTES):
            return ToolOutput(f"{shown} is a binary file ({path.stat().st_size} bytes).", is_error=True)
    content = path.read_bytes()
    lines = content.decode("utf-8", errors="replace").splitlines()
    first = start or 1
    last = min(end or len(lines), len(lines))
    if first > max(len(lines), 1):
        return ToolOutput(f"{shown} has {len(lines)} lines; start {first} is past its end.", is_error=True)
    width = len(str(last))
    numbered = [f"{number:>{width}}  {lines[number - 1]}" for number in range(first, last + 1)]
    header = f"{shown} (lines {first}-{last} of {len(lines)})"
    body = "\n".join([header, *numbered])
    text = _cap(body, max_chars, f"Read more with start and end (the file has {len(lines)} lines).")
    if text is not body:  # cut: the header, the lines that fit, then the notice, each on a line
        last = first - 1 + max(0, text.count("\n") - 1)
    return ToolOutput(text)


def _search_code(worktree: Path, tool_input: dict[str, Any], max_chars: int) -> ToolOutput:
    pattern = tool_input.get("pattern")
    if not isinstance(pattern, str) or not pattern.strip():
        return ToolOutput("search_code needs a non-empty pattern.", is_error=True)
    fixed = tool_input.get("fixed_string", False)
    if not isinstance(fixed, bool):
        return ToolOutput("fixed_string must be true or false.", is_error=True)
    target, shown = _resolve(worktree, tool_input.get("path"))
    root = Path(os.path.realpath(worktree))
    relative = "." if target == root else str(target.relative_to(root))
    # git grep: POSIX regular expressions (no catastrophic backtracking), binary files
    # skipped (-I), ignored files skipped, .git never searched; bounded in time. Confined
    # like any git, with an empty repository of ours as its GIT_DIR: the worktree's files
    # are all "untracked" to it, and nothing of the repository's config is read.
    empty = _empty_git_dir()
    command = ["grep", "-n", "-I", "-F" if fixed else "-E", "--no-color", "--untracked", "-e", pattern, "--", relative]
    try:
        result = run_git(
            command,
            cwd=root,
            access=GitAccess(read_only=(root, empty)),
            timeout=SEARCH_TIMEOUT_SECONDS,
            check=False,
            extra_env={"GIT_DIR": str(empty), "GIT_WORK_TREE": str(root)},
        )
    except GitTimedOut:
        return ToolOutput(f"The search took longer than {SEARCH_TIMEOUT_SECONDS} s; narrow it.", is_error=True)
    except GitError as exc:
        return ToolOutput(f"The search failed: {exc.message}", is_error=True)
    if result.returncode == 1:
        return ToolOutput(f"No matches for {pattern!r} in {shown}.")
    if result.returncode != 0:
        reason = result.stderr.strip().splitlines()
        return ToolOutput(f"The search failed: {' '.join(reason[-2:])[:300]}", is_error=True)
    lines = []
    for line in result.stdout.splitlines():
        location, _, text = line.partition(":")
        number, _, rest = text.partition(":")
        lines.append(f"{location}:{number}: {rest[:MAX_LINE_CHARS]}")
    more = len(lines) - MAX_SEARCH_MATCHES
    lines = lines[:MAX_SEARCH_MATCHES] + ([f"[… {more} more matches; narrow the pattern or path]"] if more > 0 else [])
    return ToolOutput(_cap("\n".join(lines), max_chars, "Narrow the pattern or the path."))


_empty_lock = threading.Lock()
_empty: list[Path] = []


def _empty_git_dir() -> Path:
    """An empty bare repository of this process's, made once: search's GIT_DIR."""
    with _empty_lock:
        if not _empty or not (_empty[0] / "HEAD").is_file():
            folder = Path(tempfile.mkdtemp(prefix="autocoder-empty-git-"))
            folder.chmod(0o755)
            run_git(["init", "--bare", "--quiet", str(folder)], cwd=folder, access=GitAccess(writable=(folder,)))
            _empty[:] = [folder]
        return _empty[0]


HANDLERS = {"list_files": _list_files, "read_file": _read_file, "search_code": _search_code}


def execute_repo_tool(*, worktree: Path, name: str, tool_input: dict[str, Any], max_chars: int) -> ToolOutput:
    handler = HANDLERS.get(name)
    if handler is None:
        return ToolOutput(f"There is no tool {name!r}; use {', '.join(HANDLERS)}.", is_error=True)
    if not isinstance(tool_input, dict):
        return ToolOutput("The tool input must be an object.", is_error=True)
    try:
        return handler(worktree, tool_input, max_chars)
    except _Refused as exc:
        return ToolOutput(str(exc), is_error=True)
    except OSError as exc:
        return ToolOutput(f"{name} failed: {exc.strerror or exc}", is_error=True)


def file_tree(*, worktree: Path, max_entries: int = 500) -> str:
    """The repository's files, one relative path a line, for the Planner's prompt."""
    root = Path(worktree)
    paths: list[str] = []
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(name for name in folders if name != ".git")
        prefix = Path(folder).relative_to(root)
        paths.extend(str(prefix / name) for name in sorted(files) if name != ".git")
        if len(paths) > max_entries:
            return "\n".join([*paths[:max_entries], f"[… more files; the first {max_entries} shown]"])
    return "\n".join(paths)
