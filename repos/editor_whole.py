"""Whole-file reads and writes under the editor's rules: what a coding agent driven over
ACP asks for (``fs/read_text_file``, ``fs/write_text_file``: llm/acp/client.py) instead
of the text editor's commands.

The same rules as repos/editor.py: the path resolved inside the worktree with
``no_symlinks`` (no ``..``, nothing in ``.git``, no symbolic link on the way, nothing
outside), binary files refused, sizes capped (a whole write at ``MAX_FILE_BYTES`` like
``create``; a read of a file over ``MAX_EDIT_BYTES`` refused), and a file kept in its
own encoding and line endings when it is rewritten (repos/editor_files.py ``TextFile``);
a new file is UTF-8. The agent names files by absolute paths as it sees the worktree
(``roots``: ``/workspace`` in its sandbox, or the worktree's own path); any other
absolute path is outside it. Every problem is an ``EditorProblem`` whose message is for
the agent.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .editor import MAX_FILE_BYTES
from .editor_files import EditorProblem, file_lines, resolve_tool_path, text_file_load
from .text_files import UTF8

OUTSIDE = "{path} is outside the repository's worktree ({root}): only files inside it may be read or written."


def worktree_relative(raw: str, roots: Iterable[str]) -> str:
    """``raw`` (absolute as the agent sees the worktree, or relative) as a path relative
    to the worktree; EditorProblem for an absolute path outside every root."""
    if not isinstance(raw, str) or not raw:
        raise EditorProblem("path is required.")
    roots = [root.rstrip("/") for root in roots]
    if not raw.startswith("/"):
        return raw
    for root in roots:
        if raw == root:
            return "."
        if raw.startswith(f"{root}/"):
            return raw[len(root) + 1 :]
    raise EditorProblem(OUTSIDE.format(path=raw, root=roots[0] if roots else "/workspace"))


def editor_read_whole(worktree: Path, raw: str, *, roots: Iterable[str], line: int | None, limit: int | None) -> str:
    """The file's text (from ``line``, 1-based, at most ``limit`` lines)."""
    path, shown = resolve_tool_path(worktree, worktree_relative(raw, roots))
    text = text_file_load(path, shown).text
    if line is None and limit is None:
        return text
    lines = file_lines(text)
    first = max((line or 1) - 1, 0)
    last = first + limit if limit is not None and limit >= 0 else None
    chosen = lines[first:last]
    return "\n".join(chosen) + ("\n" if chosen else "")


def editor_write_whole(worktree: Path, raw: str, content: str, *, roots: Iterable[str]) -> str:
    """Write ``content`` as the whole file; the path written (relative to the worktree)."""
    path, shown = resolve_tool_path(worktree, worktree_relative(raw, roots))
    if shown == ".":
        raise EditorProblem("path must name a file.")
    if len(content.encode("utf-8", errors="surrogatepass")) > MAX_FILE_BYTES:
        raise EditorProblem(f"The content is larger than the editor's limit of {MAX_FILE_BYTES} bytes.")
    if os.path.lexists(path):
        # Its encoding, BOM and CRLF endings kept; a character it cannot hold refuses.
        text_file_load(path, shown).write(content)
        return shown
    try:
        data = UTF8.encode(content)
    except UnicodeEncodeError as exc:
        raise EditorProblem(f"{shown}: the content is not valid text ({exc.reason}).") from exc
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise EditorProblem(f"A parent of {shown} is a file, not a folder.") from exc
    path.write_bytes(data)
    return shown


def owned_like_the_worktree(worktree: Path, shown: str) -> None:
    """``shown`` (just written) and the folders above it in the worktree given the
    worktree's owner. While an agent runs in its sandbox the worktree is its account's
    (core/sandbox_handover.py); a file the server wrote for it (a new file, or a
    replacement) would be the server's, and the agent's own tools could no longer write
    it: opencode writes an allowed edit through ACP and then itself. Nothing to do where
    the server cannot give files away (not root) or already owns the worktree."""
    owner = worktree.stat()
    if os.geteuid() != 0 or owner.st_uid == os.geteuid():
        return
    path = worktree / shown
    while path != worktree and worktree in path.parents:
        status = os.lstat(path)
        if (status.st_uid, status.st_gid) != (owner.st_uid, owner.st_gid):
            os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
        path = path.parent
