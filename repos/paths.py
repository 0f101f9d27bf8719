"""Which paths inside a repository may be written: the one check every writer uses
(the Coder's changes, the diff builder, the worktree writer)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

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
