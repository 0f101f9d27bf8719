"""Handing a worktree to a sandboxed command's account and taking it back — fast where
the worktree holds a restored environment (repos/environments/: a ``.venv`` or a
``node_modules`` of tens of thousands of files, hard links of a kept copy).

Those files are never handed over (they stay the storage account's: a command may
replace them, never write into them), so there is nothing to do for them but look. The
folders they sit in are handed over (a command may add and replace files there) and
the time each folder's inode last changed is noted right after: a folder whose ctime is
the same after the command had no entry created, removed, renamed or linked in it, so
its files are still the ones the command could not write, chown or chmod, and taking
it back need not look at them. A folder whose ctime moved is looked at whole, as any
other. Only folders are listed (by the directory entries' types, no ``lstat`` per file):
the cost follows the number of folders, not of files.

A command cannot set a folder's ctime back (only the kernel writes it), and every change
after the note shows a later ctime: Linux keeps inode timestamps fine-grained once they
have been looked at (multigrain timestamps, since 6.13); on older kernels a change in
the same clock tick could go unseen, so the note is taken one tick after the hand-over.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

# {folder: st_ctime_ns right after it was handed over}, for the folders of restored environments.
FolderMarks = dict[str, int]
_COARSE_TICK_SECONDS = 0.005


def kept_roots(root: Path, kept: Iterable[str]) -> frozenset[str]:
    """The absolute paths of ``kept`` (relative paths of restored environments) inside
    ``root``; anything that would lead out of it is ignored."""
    base = os.path.normpath(root)
    roots = set()
    for relative in kept:
        path = os.path.normpath(os.path.join(base, relative))
        if relative and path.startswith(base + os.sep):
            roots.add(path)
    return frozenset(roots)


def walk(root: Path, *, prune: frozenset[str] = frozenset()) -> Iterator[Path]:
    """Every path under ``root`` (root included), symlinks not followed, not descending
    into (nor yielding) the folders in ``prune``."""
    yield root
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        if prune:
            dirnames[:] = [name for name in dirnames if os.path.join(directory, name) not in prune]
        for name in (*dirnames, *filenames):
            yield Path(directory, name)


def _folders(top: str) -> Iterator[str]:
    """``top`` and the folders under it, by directory entry type (no stat per file)."""
    stack = [top]
    while stack:
        folder = stack.pop()
        yield folder
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, PermissionError), os.scandir(folder) as entries:
            stack.extend(entry.path for entry in entries if entry.is_dir(follow_symlinks=False))


def hand_over_kept(tops: frozenset[str], uid: int, gid: int) -> FolderMarks:
    """The folders of the restored environments at ``tops`` handed to ``uid``/``gid``,
    their files left as they are; the marks to take them back by."""
    handed: list[str] = []
    for top in tops:
        try:
            if not stat.S_ISDIR(os.lstat(top).st_mode):
                continue
        except FileNotFoundError:
            continue
        for folder in _folders(top):
            with contextlib.suppress(FileNotFoundError):
                os.chown(folder, uid, gid, follow_symlinks=False)
                handed.append(folder)
    if handed and not _fine_grained_ctime():
        time.sleep(_COARSE_TICK_SECONDS)
    marks: FolderMarks = {}
    for folder in handed:
        with contextlib.suppress(FileNotFoundError):
            marks[folder] = os.lstat(folder).st_ctime_ns
    return marks


def unchanged_folder(folder: str, info: os.stat_result, marks: FolderMarks) -> bool:
    return stat.S_ISDIR(info.st_mode) and marks.get(folder) == info.st_ctime_ns


def kept_paths_to_check(tops: frozenset[str], marks: FolderMarks) -> Iterator[tuple[str, os.stat_result]]:
    """After the command: every path under ``tops`` that taking back must look at — each
    folder, and the entries of the folders whose ctime moved (or that the command made)
    — with its ``lstat``. A folder's state is read before anything of it is changed."""
    stack = [top for top in tops]
    while stack:
        path = stack.pop()
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        yield path, info
        if not stat.S_ISDIR(info.st_mode):
            continue
        unchanged = unchanged_folder(path, info, marks)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, PermissionError), os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif not unchanged:
                    with contextlib.suppress(FileNotFoundError):
                        yield entry.path, os.lstat(entry.path)


_fine_grained: bool | None = None


def _fine_grained_ctime() -> bool:
    """Multigrain inode timestamps (Linux 6.13+): a change right after a look always
    shows a later ctime."""
    global _fine_grained
    if _fine_grained is None:
        release = os.uname().release.split(".")
        try:
            _fine_grained = (int(release[0]), int(release[1])) >= (6, 13)
        except (ValueError, IndexError):
            _fine_grained = False
    return _fine_grained
