"""The files the Coder's editor (repos/editor.py) works on: a tool input's path and
arguments checked, a text file loaded whole in its own encoding and line endings and
written back the same way (repos/text_files.py is the encoding rule), and the numbered
lines, snippets and nearest matches its replies show."""

from __future__ import annotations

import difflib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import PathRefused, resolve_in_worktree
from .text_files import UTF8, Encoding, TextFileRefused, text_decode

MAX_EDIT_BYTES = 20_000_000  # str_replace and insert (the file is loaded whole)
SNIPPET_CONTEXT_LINES = 4
FUZZY_CANDIDATES = 20


class EditorProblem(Exception):
    """An error outcome: raised by the editor's commands and helpers, returned by
    ``editor_run`` as a ``ToolOutcome`` with ``is_error``."""


@dataclass
class TextFile:
    path: Path
    shown: str
    text: str  # with LF newlines when the file is all-CRLF
    encoding: Encoding
    crlf: bool
    size: int

    def write(self, text: str) -> None:
        on_disk = text.replace("\r\n", "\n").replace("\n", "\r\n") if self.crlf else text
        try:
            data = self.encoding.encode(on_disk)
        except UnicodeEncodeError as exc:
            raise EditorProblem(cannot_hold_message(self.shown, self.encoding, on_disk)) from exc
        if len(data) > MAX_EDIT_BYTES:
            raise EditorProblem(f"The result would be larger than {MAX_EDIT_BYTES} bytes; the edit was not applied.")
        _replace_file(self.path, data)
        self.text = text.replace("\r\n", "\n") if self.crlf else text
        self.size = len(data)


def cannot_hold_message(shown: str, encoding: Encoding, text: str) -> str:
    characters = encoding.unencodable(text)
    named = ", ".join(f"{character!r} (U+{ord(character):04X})" for character in characters[:10])
    code = ord(characters[0]) if characters else 0x20AC
    escape = f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return (
        f"No change was made: {shown} is {encoding.label}, which cannot hold {named}. The editor never changes "
        "a file's encoding: write each such character as an escape the file's language understands (for example "
        f"{escape} in a Python, Java or JavaScript string, &#x{code:X}; in HTML or XML), or rewrite the text "
        "without it. To convert the file to UTF-8 on purpose, delete_file it with force: true and create it again."
    )


def encoding_note(encoding: Encoding) -> str:
    return "" if encoding.codec == UTF8.codec else f" ({encoding.label}, kept)"


def _replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` as a new file in place of ``path`` (its mode kept): a second name
    the file has — a hard link a test command made, say to the worktree's ``.git``
    pointer — keeps the old content instead of being written through."""
    mode = stat.S_IMODE(path.stat().st_mode)
    handle, temporary = tempfile.mkstemp(prefix=".autocoder-edit-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as output:
            output.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def resolve_tool_path(worktree: Path, raw: Any) -> tuple[Path, str]:
    if raw is None:
        raise EditorProblem("path is required: a path relative to the repository root.")
    try:
        return resolve_in_worktree(worktree, raw, no_symlinks=True)
    except PathRefused as exc:
        raise EditorProblem(str(exc)) from exc


def string_input(tool_input: dict[str, Any], name: str, *, required: bool = True) -> str:
    value = tool_input.get(name)
    if value is None and not required:
        return ""
    if value is None:
        raise EditorProblem(f"{name} is required.")
    if not isinstance(value, str):
        raise EditorProblem(f"{name} must be a string.")
    return value


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def regular_file_size(path: Path, shown: str) -> int:
    """The file's size, or a problem when ``path`` is not an existing regular file."""
    if not os.path.lexists(path):
        raise EditorProblem(f"{shown} does not exist. View its folder or use search_code to find the right path.")
    if path.is_dir():
        raise EditorProblem(f"{shown} is a folder, not a file.")
    if not path.is_file():
        raise EditorProblem(f"{shown} is not a regular file.")
    return path.stat().st_size


def text_file_load(path: Path, shown: str) -> TextFile:
    """The whole file, for an edit."""
    size = regular_file_size(path, shown)
    if size > MAX_EDIT_BYTES:
        raise EditorProblem(
            f"{shown} is {size} bytes, over the editor's limit of {MAX_EDIT_BYTES} bytes for an edit: "
            "the editor cannot change it. It can still be viewed by view_range."
        )
    try:
        scan, text = text_decode(path.read_bytes(), shown)
    except TextFileRefused as exc:
        raise EditorProblem(str(exc)) from exc
    return TextFile(
        path=path,
        shown=shown,
        text=text.replace("\r\n", "\n") if scan.crlf else text,
        encoding=scan.encoding,
        crlf=scan.crlf,
        size=size,
    )


def file_lines(text: str) -> list[str]:
    """The file's lines as ``cat -n`` counts them (a final newline ends the last line)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def numbered_lines(lines: list[str], first: int) -> str:
    return "\n".join(f"{number:>6}\t{line}" for number, line in enumerate(lines, start=first))


def edit_snippet(file: TextFile, first: int, last: int) -> str:
    lines = file_lines(file.text)
    start = max(1, first - SNIPPET_CONTEXT_LINES)
    end = min(len(lines), last + SNIPPET_CONTEXT_LINES)
    return numbered_lines(lines[start - 1 : end], start)


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def lines_of(text: str, indexes: list[int]) -> list[int]:
    """The line of each of ``indexes`` (ascending), counting the text once."""
    numbers, line, counted = [], 1, 0
    for index in indexes:
        line += text.count("\n", counted, index)
        counted = index
        numbers.append(line)
    return numbers


def nearest_lines(text: str, old: str) -> str:
    """The region of ``text`` most like ``old``, numbered, or '' when nothing is close."""
    lines = file_lines(text)
    wanted = old.strip("\n")
    size = max(1, len(file_lines(wanted)))
    if not lines:
        return ""
    windows = [(i, "\n".join(lines[i : i + size])) for i in range(max(1, len(lines) - size + 1))]
    scored = []
    for index, window in windows:
        matcher = difflib.SequenceMatcher(None, window, wanted, autojunk=False)
        scored.append((matcher.quick_ratio(), index, window))
    scored.sort(key=lambda item: -item[0])
    best = max(
        (
            (difflib.SequenceMatcher(None, window, wanted, autojunk=False).ratio(), index)
            for _, index, window in scored[:FUZZY_CANDIDATES]
        ),
        key=lambda item: (item[0], -item[1]),
    )
    ratio, index = best
    if ratio < 0.3:
        return ""
    return numbered_lines(lines[index : index + size], index + 1)
