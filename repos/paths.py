"""Which paths inside a repository may be written: the one check every writer uses
(the Coder's changes, the diff builder, the worktree writer), and the resolution of an
agent tool's path inside a worktree (the read-only tools and the editor)."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

MAX_PATH_LENGTH = 500
_DRIVE = re.compile(r"^[A-Za-z]:")


def check_path(path: str) -> str | None:
    """Why ``path`` may not be written, or None if it is a safe relative path."""
    if not isinstance(path, str) or not path.strip():
        return "The file path is empty."
    if "\x00" in path:
        return "The file path contains a NUL character."
    if len(path) > MAX_PATH_LENGTH:
        return f"The file path is longer than {MAX_PATH_LENGTH} characters."
    normalised = path.replace("\\", "/")
    if normalised.startswith("/") or _DRIVE.match(normalised):
        return f"Absolute paths are not allowed: {path}"
    parts = PurePosixPath(normalised).parts
    if ".." in parts:
        return f"Paths may not leave the repository ('..'): {path}"
    if parts and parts[0] == ".git":
        return f"Paths inside .git are not allowed: {path}"
    return None


class PathRefused(Exception):
    """A tool's path that may not be used; the message says why, for the model."""


def resolve_in_worktree(worktree: Path, raw: Any, *, default: str = ".", no_symlinks: bool = False) -> tuple[Path, str]:
    """The real path inside ``worktree`` for the agent-given ``raw``, and its display form.

    Refused (``PathRefused``): non-strings, NUL characters, absolute paths, ``..``, any
    ``.git`` component, and paths whose real location is outside the worktree (a
    symbolic link leading out). With ``no_symlinks`` (the writing tools) any symbolic link
    among the path's components is refused too, even one that stays inside. The path
    need not exist. Used by the read-only tools (repos/tools.py) and the editor
    (repos/editor.py)."""
    if raw is None:
        raw = default
    if not isinstance(raw, str):
        raise PathRefused("path must be a string.")
    text = raw.strip().replace("\\", "/") or "."
    if "\x00" in text:
        raise PathRefused("path contains a NUL character.")
    if len(text) > MAX_PATH_LENGTH:
        raise PathRefused(f"The path is longer than {MAX_PATH_LENGTH} characters.")
    if text.startswith("/") or _DRIVE.match(text):
        raise PathRefused(f"Absolute paths are not allowed: {raw}. Give a path relative to the repository root.")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise PathRefused(f"Paths may not leave the repository ('..'): {raw}")
    if any(part.lower() == ".git" for part in parts):
        raise PathRefused("The .git folder is off limits.")
    root = Path(os.path.realpath(worktree))
    if no_symlinks:
        current = root
        for part in parts:
            current = current / part
            if current.is_symlink():
                shown = current.relative_to(root)
                raise PathRefused(f"{shown} is a symbolic link; the editing tools do not follow links.")
    resolved = Path(os.path.realpath(root.joinpath(*parts)))
    if resolved != root and root not in resolved.parents:
        raise PathRefused(f"{raw} leads outside the repository (a symbolic link?).")
    if (root / ".git") in (resolved, *resolved.parents):
        raise PathRefused("The .git folder is off limits.")
    return resolved, "/".join(parts) or "."
