"""File changes → reviewable diffs: unified diff text, per-line highlighted rows, a file
tree and stats. Paths from agents are checked (repos.paths) before anything uses them."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from repos.paths import MAX_PATH_LENGTH, check_path

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def language_for(path: str) -> str:
    try:
        return str(get_lexer_for_filename(path).name)
    except ClassNotFound:
        return "Text"


def _lexer_for(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _highlighted_lines(text: str, lexer: Lexer) -> list[str]:
    if not text:
        return []
    # HtmlFormatter closes and reopens spans at line ends, so the output splits cleanly.
    html = highlight(text, lexer, HtmlFormatter(nowrap=True))
    lines = html.split("\n")
    if text.endswith("\n") and lines and lines[-1] == "":
        lines.pop()
    return lines


@dataclass
class DiffRow:
    kind: str  # "hunk", "add", "del", "ctx"
    old_line: int | None
    new_line: int | None
    html: str
    # The line as plain text (the new file's for add and context rows, the old file's for
    # del rows): what a line comment quotes.
    text: str = ""


@dataclass
class FileDiff:
    path: str
    action: str
    language: str
    added: int
    removed: int
    unified: str
    rows: list[DiffRow] = field(default_factory=list)

    def new_lines_shown(self) -> dict[int, str]:
        """The new file's lines the diff shows (added and context), by number: the lines
        a person can comment on."""
        return {row.new_line: row.text for row in self.rows if row.new_line is not None}

    def old_lines_removed(self) -> dict[int, str]:
        """The old file's lines the change removed, by number: the removed lines a person
        can comment on."""
        return {row.old_line: row.text for row in self.rows if row.kind == "del" and row.old_line is not None}

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "action": self.action,
            "language": self.language,
            "added": self.added,
            "removed": self.removed,
            "diff": self.unified,
        }


@dataclass
class ChangeSetDiff:
    files: list[FileDiff]
    rejected: list[dict[str, str]]

    @property
    def stats(self) -> dict[str, int]:
        return {
            "files_changed": len(self.files),
            "lines_added": sum(f.added for f in self.files),
            "lines_removed": sum(f.removed for f in self.files),
        }

    @property
    def tree(self) -> list[dict[str, Any]]:
        """Nested folders and files: ``[{name, path, children?, action?}]``, sorted."""
        root: dict[str, Any] = {}
        for file in self.files:
            node = root
            parts = file.path.split("/")
            for part in parts[:-1]:
                node = node.setdefault(part + "/", {})
            node[parts[-1]] = file.action

        def build(node: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
            items = []
            for name in sorted(node, key=lambda n: (not n.endswith("/"), n)):
                value = node[name]
                if isinstance(value, dict):
                    folder = name.rstrip("/")
                    items.append({"name": folder, "path": prefix + folder, "children": build(value, prefix + name)})
                else:
                    items.append({"name": name, "path": prefix + name, "action": value})
            return items

        return build(root, "")

    @property
    def unified(self) -> str:
        return "".join(f.unified for f in self.files)

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": [f.as_dict() for f in self.files],
            "tree": self.tree,
            "stats": self.stats,
            "rejected": self.rejected,
        }


def _plain(diff_line: str) -> str:
    """A diff line's text without its marker and line ending."""
    return diff_line[1:].rstrip("\r\n")


def _unified_diff(old: list[str], new: list[str], old_label: str, new_label: str, context: int = 3) -> Iterator[str]:
    """``difflib.unified_diff``, but matching every line as git does. difflib's matcher
    treats a line found in more than 1% of a file over 200 lines as junk ("autojunk"):
    blank lines, in code; a one-line change next to the blank line a file ends with
    then came out as two removed and two added lines."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for index, group in enumerate(matcher.get_grouped_opcodes(context)):
        if index == 0:
            yield f"--- {old_label}\n"
            yield f"+++ {new_label}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_hunk_range(first[1], last[2])} +{_hunk_range(first[3], last[4])} @@\n"
        for tag, old_start, old_end, new_start, new_end in group:
            if tag == "equal":
                yield from (" " + line for line in old[old_start:old_end])
                continue
            yield from ("-" + line for line in old[old_start:old_end])
            yield from ("+" + line for line in new[new_start:new_end])


def _hunk_range(start: int, stop: int) -> str:
    """A hunk header's range, as ``diff -u`` writes it (difflib's own rule)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def _file_diff(path: str, action: str, old: str, new: str) -> FileDiff:
    old_label = "/dev/null" if action == "create" else f"a/{path}"
    new_label = "/dev/null" if action == "delete" else f"b/{path}"
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    diff_lines = list(_unified_diff(old_lines, new_lines, old_label, new_label))
    unified = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in diff_lines)
    lexer = _lexer_for(path)
    old_html = _highlighted_lines(old, lexer)
    new_html = _highlighted_lines(new, lexer)
    rows: list[DiffRow] = []
    added = removed = 0
    old_no = new_no = 0
    for line in diff_lines[2:]:
        match = _HUNK.match(line)
        if match:
            old_no, new_no = int(match.group(1)), int(match.group(2))
            rows.append(DiffRow("hunk", None, None, line.rstrip("\n")))
        elif line.startswith("+"):
            rows.append(
                DiffRow("add", None, new_no, new_html[new_no - 1] if new_no - 1 < len(new_html) else "", _plain(line))
            )
            new_no += 1
            added += 1
        elif line.startswith("-"):
            rows.append(
                DiffRow("del", old_no, None, old_html[old_no - 1] if old_no - 1 < len(old_html) else "", _plain(line))
            )
            old_no += 1
            removed += 1
        else:
            rows.append(
                DiffRow("ctx", old_no, new_no, new_html[new_no - 1] if new_no - 1 < len(new_html) else "", _plain(line))
            )
            old_no += 1
            new_no += 1
    return FileDiff(path, action, language_for(path), added, removed, unified, rows)


def diff_changes(
    changes: list[dict[str, Any]], *, read_current: Callable[[str], str | None] | None = None
) -> ChangeSetDiff:
    """Diff each change against the file's current content (``read_current(path)``;
    None or no reader means the file does not exist yet)."""
    files: list[FileDiff] = []
    rejected: list[dict[str, str]] = []
    for change in changes:
        path = str(change.get("file_path", ""))
        problem = check_path(path)
        if problem:
            rejected.append({"file_path": path[:MAX_PATH_LENGTH], "reason": problem})
            continue
        path = str(PurePosixPath(path.replace("\\", "/")))
        action = change.get("action", "modify")
        current = (read_current(path) if read_current else None) or ""
        new = "" if action == "delete" else str(change.get("content", ""))
        files.append(_file_diff(path, action, current, new))
    files.sort(key=lambda f: f.path)
    return ChangeSetDiff(files, rejected)


def diff_file_versions(files: list[dict[str, Any]]) -> ChangeSetDiff:
    """Diffs of files given with both versions (``old_content``/``new_content``), as a
    branch's changes are read from git."""
    diffs = [
        _file_diff(
            str(file["file_path"]),
            str(file.get("action", "modify")),
            "" if file.get("binary") else str(file.get("old_content", "")),
            "" if file.get("binary") else str(file.get("new_content", "")),
        )
        for file in files
    ]
    diffs.sort(key=lambda f: f.path)
    return ChangeSetDiff(diffs, [])
