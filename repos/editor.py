"""The Coder's editing tools, executed inside a run's worktree: Anthropic's text editor
tool (``str_replace_based_edit_tool``, ``text_editor_20250728``: ``view``, ``create``,
``str_replace``, ``insert``), ``search_code`` and ``delete_file``.

One entry point, ``editor_run(worktree, name, tool_input)``, never raises for bad input:
every problem is a ``ToolOutcome`` with ``is_error=True`` whose message says what to do.
Each edit is applied to the file at once; ``changed_path`` names the file it changed.

Decisions:

- Paths go through ``repos.paths.resolve_in_worktree`` with ``no_symlinks``: no absolute
  paths, no ``..``, nothing in ``.git``, and no symbolic link anywhere along the path.
- ``create`` makes a new file only (as Anthropic documents it: "create a new file"): an
  existing path is an error that points at ``str_replace``/``insert``, or ``delete_file``
  then ``create`` to rewrite it whole. Missing parent folders are made.
- Encodings (the rule: repos/text_files.py): UTF-8 with or without a BOM, UTF-16 LE/BE
  with a BOM, and any other file without NUL bytes that is not UTF-8 as latin-1. A file
  is viewed decoded (``view`` names the encoding when it is not UTF-8) and ``str_replace``
  / ``insert`` write it back in its own encoding and BOM. New text the encoding cannot
  hold (``€`` into latin-1) refuses the edit, file untouched, never re-encoded; the
  message suggests an escape or a rewrite. Binary files (NUL bytes) are refused.
- ``create`` writes UTF-8 without a BOM, so ``delete_file`` of a file in any other
  encoding (UTF-8 with a BOM included) is refused unless ``force`` is true: a delete
  then create would otherwise re-encode it silently. The refusal comes at the one call
  where the model can still choose (edit in place instead, or convert on purpose), and it
  needs no memory: the editor keeps no state between calls, and a run's Coder may be
  resumed by another worker, where a record of deleted files' encodings would be gone.
- Line endings: a file whose every newline is CRLF is matched and edited with LF and
  written back with CRLF throughout (``old_str``/``new_str`` may use either). Files with
  LF or mixed endings are matched as they are.
- Size: ``view`` of a whole file and ``create`` stop at ``MAX_FILE_BYTES``. A larger
  file is viewed by ``view_range`` (streamed: only those lines are read into the reply)
  and edited with ``str_replace`` / ``insert`` up to ``MAX_EDIT_BYTES`` (loaded whole;
  repos/editor_files.py); above that it is refused with a message saying so. ``view``
  output is cut at ``max_characters`` with a note saying how to see the rest.
"""

from __future__ import annotations

import os
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm.providers.base import Tool

from .editor_files import (
    EditorProblem,
    cannot_hold_message,
    edit_snippet,
    encoding_note,
    file_lines,
    is_integer,
    line_of,
    lines_of,
    nearest_lines,
    regular_file_size,
    resolve_tool_path,
    string_input,
    text_file_load,
)
from .text_files import UTF8, TextFileRefused, text_lines, text_scan_file
from .tools import SEARCH_CODE, execute_repo_tool

EDITOR_TOOL_NAME = "str_replace_based_edit_tool"
EDITOR_TOOL_TYPE = "text_editor_20250728"
MAX_FILE_BYTES = 1_000_000  # view whole, create
DEFAULT_MAX_CHARACTERS = 20_000
MAX_DIRECTORY_ENTRIES = 500
DIRECTORY_DEPTH = 2
MAX_LISTED_MATCHES = 50  # line numbers named when old_str matches several times
COMMANDS = ("view", "create", "str_replace", "insert")


def editor_tool_definition(max_characters: int | None = DEFAULT_MAX_CHARACTERS) -> dict[str, Any]:
    """The text editor's entry for the Messages API's ``tools`` list (a server-defined
    tool: type and name only, and the ``view`` truncation limit)."""
    definition: dict[str, Any] = {"type": EDITOR_TOOL_TYPE, "name": EDITOR_TOOL_NAME}
    if max_characters is not None:
        definition["max_characters"] = max_characters
    return definition


EDITOR_TOOL = editor_tool_definition()

DELETE_FILE = Tool(
    name="delete_file",
    description=(
        "Delete one file of the repository (not a folder). path is relative to the repository root. "
        "To rewrite a file whole, delete it and create it again with str_replace_based_edit_tool. "
        "create writes UTF-8 without a BOM, so a file in another encoding (latin-1, UTF-16, a BOM) "
        "is deleted only with force: true; edit it in place with str_replace or insert to keep its encoding."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File, relative to the repository root."},
            "force": {
                "type": "boolean",
                "description": "Delete a file that is not plain UTF-8 too (created again, it would be UTF-8).",
            },
        },
        "required": ["path"],
    },
)
# search_code is the read-only tools' own (repos/tools.py): one name, one behaviour.
EDITOR_TOOLS = (SEARCH_CODE, DELETE_FILE)


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    is_error: bool = False
    changed_path: str | None = None  # relative to the worktree, for the edits that changed a file


def _cap(text: str, max_characters: int, hint: str) -> str:
    if len(text) <= max_characters:
        return text
    cut = text[:max_characters].rsplit("\n", 1)[0]
    return f"{cut}\n[… output truncated at {max_characters} characters. {hint}]"


# --- The text editor's commands -----------------------------------------------------------------


def _view(worktree: Path, tool_input: dict[str, Any], max_characters: int) -> ToolOutcome:
    path, shown = resolve_tool_path(worktree, tool_input.get("path"))
    view_range = tool_input.get("view_range")
    if path.is_dir():
        if view_range is not None:
            raise EditorProblem("view_range applies to files; this is a folder.")
        return ToolOutcome(_cap(_listing(path, shown), max_characters, "View a subfolder to see more."))
    size = regular_file_size(path, shown)
    try:
        scan = text_scan_file(path, shown)
    except TextFileRefused as exc:
        raise EditorProblem(str(exc)) from exc
    count = scan.lines
    first, last = 1, count
    if view_range is None and size > MAX_FILE_BYTES:
        raise EditorProblem(
            f"{shown} is {size} bytes ({count} lines), over the editor's limit of {MAX_FILE_BYTES} bytes for viewing "
            "a whole file: view it in parts with view_range, e.g. [1, 200], or find the lines with search_code."
        )
    if view_range is not None:
        if not (isinstance(view_range, list) and len(view_range) == 2 and all(is_integer(v) for v in view_range)):
            raise EditorProblem(
                "view_range must be a list of two integers: [start, end], end -1 for the end of the file."
            )
        first, last = view_range
        if first < 1 or first > count:
            raise EditorProblem(f"view_range start {first} is out of bounds: {shown} has {count} lines (1-{count}).")
        if last == -1:
            last = count
        elif last < first or last > count:
            raise EditorProblem(
                f"view_range end {last} is out of bounds: it must be from {first} to {count}, or -1 for the end."
            )
    if not count:
        return ToolOutcome(f"{shown} is empty.")
    # Read only the lines asked for, and only until the reply is full: a large file's rest
    # never reaches memory.
    shown_lines: list[str] = []
    length = 0
    with closing(text_lines(path, scan, first, max_line_chars=max_characters)) as lines:
        for number, line in lines:
            if number > last or length > max_characters:
                break
            shown_lines.append(f"{number:>6}\t{line}")
            length += len(shown_lines[-1]) + 1
    hint = f"Use view_range to see the rest ({shown} has {count} lines)."
    body = _cap("\n".join(shown_lines), max_characters, hint)
    if scan.encoding.codec != UTF8.codec:
        body = f"({scan.encoding.label}: shown decoded; edits are written back in {scan.encoding.label})\n{body}"
    return ToolOutcome(body)


def _listing(folder: Path, shown: str) -> str:
    entries: list[str] = []
    more = 0

    def walk(current: Path, prefix: str, depth: int) -> None:
        nonlocal more
        try:
            children = sorted(os.scandir(current), key=lambda entry: entry.name)
        except OSError:
            return
        for entry in children:
            if entry.name.startswith("."):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if len(entries) >= MAX_DIRECTORY_ENTRIES:
                more += 1
            else:
                entries.append(f"{prefix}{entry.name}{'/' if is_dir else ''}")
            if is_dir and depth < DIRECTORY_DEPTH:
                walk(Path(entry.path), f"{prefix}{entry.name}/", depth + 1)

    walk(folder, "" if shown == "." else f"{shown}/", 1)
    header = f"Files and folders up to {DIRECTORY_DEPTH} levels deep in {shown}, hidden items excluded:"
    tail = [f"[… {more} more entries; view a subfolder]"] if more else []
    return "\n".join([header, *(entries or ["(empty)"]), *tail])


def _create(worktree: Path, tool_input: dict[str, Any], _max: int) -> ToolOutcome:
    path, shown = resolve_tool_path(worktree, tool_input.get("path"))
    file_text = string_input(tool_input, "file_text")
    if os.path.lexists(path):
        kind = "folder" if path.is_dir() else "file"
        raise EditorProblem(
            f"{shown} already exists (a {kind}); create makes new files only. Change it with str_replace or insert, "
            "or delete_file it first to rewrite it whole."
        )
    try:
        data = UTF8.encode(file_text)
    except UnicodeEncodeError as exc:
        raise EditorProblem(cannot_hold_message(shown, UTF8, file_text)) from exc
    if len(data) > MAX_FILE_BYTES:
        raise EditorProblem(f"file_text is larger than the editor's limit of {MAX_FILE_BYTES} bytes.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise EditorProblem(f"A parent of {shown} is a file, not a folder.") from exc
    path.write_bytes(data)
    return ToolOutcome(f"Created {shown} ({len(file_lines(file_text))} lines).", changed_path=shown)


def _str_replace(worktree: Path, tool_input: dict[str, Any], _max: int) -> ToolOutcome:
    path, shown = resolve_tool_path(worktree, tool_input.get("path"))
    old = string_input(tool_input, "old_str")
    new = string_input(tool_input, "new_str", required=False)
    if not old:
        raise EditorProblem("old_str must not be empty; to add text use insert.")
    file = text_file_load(path, shown)
    if file.crlf:
        old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
    starts = []
    index = file.text.find(old)
    while index != -1:
        starts.append(index)
        index = file.text.find(old, index + 1)
    if not starts:
        nearest = nearest_lines(file.text, old) if file.size <= MAX_FILE_BYTES else ""
        message = f"No replacement was made: old_str does not appear verbatim in {shown}."
        if nearest:
            message += f" The most similar lines are:\n{nearest}\n"
        message += "old_str must match exactly, whitespace and indentation included: view the file and copy the text."
        raise EditorProblem(message)
    if len(starts) > 1:
        numbers = ", ".join(str(number) for number in lines_of(file.text, starts[:MAX_LISTED_MATCHES]))
        if len(starts) > MAX_LISTED_MATCHES:
            numbers += ", …"
        raise EditorProblem(
            f"No replacement was made: old_str appears {len(starts)} times in {shown}, at lines {numbers}. "
            "Include more surrounding lines so it matches exactly once."
        )
    start = starts[0]
    file.write(file.text[:start] + new + file.text[start + len(old) :])
    first = line_of(file.text, start)
    last = first + new.count("\n")
    return ToolOutcome(
        f"Edited {shown}{encoding_note(file.encoding)}. The changed region now reads:\n"
        f"{edit_snippet(file, first, last)}",
        changed_path=shown,
    )


def _insert(worktree: Path, tool_input: dict[str, Any], _max: int) -> ToolOutcome:
    path, shown = resolve_tool_path(worktree, tool_input.get("path"))
    line = tool_input.get("insert_line")
    if line is None:
        raise EditorProblem("insert_line is required: the line after which to insert (0 for the top of the file).")
    if not is_integer(line):
        raise EditorProblem("insert_line must be an integer (0 for the top of the file).")
    new = string_input(tool_input, "new_str")
    file = text_file_load(path, shown)
    if file.crlf:
        new = new.replace("\r\n", "\n")
    lines = file_lines(file.text)
    if line < 0 or line > len(lines):
        raise EditorProblem(
            f"insert_line {line} is out of bounds: {shown} has {len(lines)} lines; give 0 to {len(lines)}."
        )
    if line == len(lines) and file.text and not file.text.endswith("\n"):
        text = f"{file.text}\n{new}"  # after a last line without a newline: the file keeps none
    else:
        block = new if new.endswith("\n") else f"{new}\n"
        offset = 0 if line == 0 else sum(len(each) + 1 for each in lines[:line])
        text = file.text[:offset] + block + file.text[offset:]
    file.write(text)
    last = line + max(1, len(file_lines(new)))
    return ToolOutcome(
        f"Inserted into {shown}{encoding_note(file.encoding)} after line {line}:\n{edit_snippet(file, line + 1, last)}",
        changed_path=shown,
    )


_EDITOR_COMMANDS = {"view": _view, "create": _create, "str_replace": _str_replace, "insert": _insert}


def _editor(worktree: Path, tool_input: dict[str, Any], max_characters: int) -> ToolOutcome:
    command = tool_input.get("command")
    if command == "undo_edit":
        raise EditorProblem("undo_edit is not available; undo a change with str_replace.")
    handler = _EDITOR_COMMANDS.get(command) if isinstance(command, str) else None
    if handler is None:
        raise EditorProblem(f"Unknown command {command!r}; use one of {', '.join(COMMANDS)}.")
    return handler(worktree, tool_input, max_characters)


# --- The other two tools --------------------------------------------------------------------------


def _delete_file(worktree: Path, tool_input: dict[str, Any], _max: int) -> ToolOutcome:
    path, shown = resolve_tool_path(worktree, tool_input.get("path"))
    if shown == ".":
        raise EditorProblem("path must name a file.")
    if not os.path.lexists(path):
        raise EditorProblem(f"{shown} does not exist.")
    if path.is_dir():
        raise EditorProblem(f"{shown} is a folder; delete_file deletes single files only.")
    force = tool_input.get("force", False)
    if not isinstance(force, bool):
        raise EditorProblem("force must be true or false.")
    if not force and path.is_file():
        try:
            encoding = text_scan_file(path, shown).encoding
        except TextFileRefused:
            encoding = UTF8  # binary: no text encoding to lose
        if not encoding.is_plain_utf8:
            raise EditorProblem(
                f"{shown} was not deleted: it is {encoding.label}, and create writes UTF-8 without a BOM, so "
                "deleting it to create it again would change its encoding. Edit it in place with str_replace or "
                "insert, which keep its encoding; if you mean to delete it (or to convert it), call delete_file "
                "again with force: true."
            )
    path.unlink()
    return ToolOutcome(f"Deleted {shown}.", changed_path=shown)


def _search_code(worktree: Path, tool_input: dict[str, Any], max_characters: int) -> ToolOutcome:
    output = execute_repo_tool(worktree=worktree, name="search_code", tool_input=tool_input, max_chars=max_characters)
    return ToolOutcome(output.text, is_error=output.is_error)


_TOOLS = {EDITOR_TOOL_NAME: _editor, SEARCH_CODE.name: _search_code, DELETE_FILE.name: _delete_file}


def editor_run(
    worktree: Path, name: str, tool_input: dict[str, Any], *, max_characters: int = DEFAULT_MAX_CHARACTERS
) -> ToolOutcome:
    """Run one call of the editing tools in ``worktree``; errors are outcomes, not raised."""
    handler = _TOOLS.get(name)
    if handler is None:
        return ToolOutcome(f"There is no tool {name!r}; use {', '.join(_TOOLS)}.", is_error=True)
    if not isinstance(tool_input, dict):
        return ToolOutcome("The tool input must be an object.", is_error=True)
    try:
        return handler(Path(worktree), tool_input, max_characters)
    except EditorProblem as exc:
        return ToolOutcome(str(exc), is_error=True)
    except OSError as exc:
        return ToolOutcome(f"{name} failed: {exc.strerror or exc}", is_error=True)
