"""The repository's own instructions for coding agents: AGENTS.md (or, without one,
CLAUDE.md) at the root of a run's worktree, read once per phase into the agents' system
prompt (pipelines/agents/conversation.py)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from .paths import PathRefused, resolve_in_worktree

logger = logging.getLogger(__name__)

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
INSTRUCTIONS_MAX_BYTES = 16 * 1024


def repository_instructions(worktree: Path) -> tuple[str, str] | None:
    """``(file name, text)`` of the first of INSTRUCTION_FILES at the worktree's root
    that is a regular file inside it, cut to INSTRUCTIONS_MAX_BYTES; None when there is
    none. A symbolic link leading out of the worktree, a non-regular file, or a file
    that is not UTF-8 text is skipped (logged)."""
    for name in INSTRUCTION_FILES:
        text = _read(worktree, name)
        if text is not None:
            return name, text
    return None


def _read(worktree: Path, name: str) -> str | None:
    try:
        path, _ = resolve_in_worktree(worktree, name)
    except PathRefused as exc:
        logger.warning("Skipping %s in %s: %s", name, worktree, exc)
        return None
    try:
        # O_NOFOLLOW: the resolved path has no link left; refuse one swapped in since.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("Skipping %s in %s: %s", name, worktree, exc)
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        logger.warning("Skipping %s in %s: not a regular file", name, worktree)
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(INSTRUCTIONS_MAX_BYTES + 1)
    if b"\x00" in data:
        logger.warning("Skipping %s in %s: binary content", name, worktree)
        return None
    truncated = len(data) > INSTRUCTIONS_MAX_BYTES
    if truncated:
        data = data[:INSTRUCTIONS_MAX_BYTES]
    try:
        # A cut may split a character: drop an incomplete one at the end only.
        text = data.decode("utf-8", errors="strict") if not truncated else _decode_cut(data)
    except UnicodeDecodeError:
        logger.warning("Skipping %s in %s: not UTF-8 text", name, worktree)
        return None
    if truncated:
        text = f"{text.rstrip()}\n\n[truncated: the file is {info.st_size} bytes]"
    return text.strip()


def _decode_cut(data: bytes) -> str:
    for drop in range(4):
        try:
            return data[: len(data) - drop].decode("utf-8")
        except UnicodeDecodeError:
            continue
    raise UnicodeDecodeError("utf-8", data, 0, len(data), "not UTF-8 text")
