"""Handing a worktree to a sandboxed command's account and taking it back.

For the command's duration the worktree (and the folders of the project's own it
writes) belongs to the command's own account from the pool (core/sandbox_accounts.py).
Afterwards it is taken back: owned by the storage account again, with no setuid or
setgid bits, and with its ``.git`` pointer file as git wrote it — the same bytes in a
file of its own (a command that replaced it with a directory of its own, or kept a hard
link to it to write through later, would otherwise point git elsewhere).

Fast where the worktree holds a restored environment (repos/environments/: a ``.venv``
or a ``node_modules`` of tens of thousands of files, hard links of a kept copy).

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
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from core.sandbox_accounts import sandbox_slot, storage_ids
from core.sandbox_bwrap import support_files_write
from core.sandbox_git import git_view_prepare

logger = logging.getLogger(__name__)

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


# --- A command's worktree, from before it starts until it has ended -----------------


@contextlib.contextmanager
def workspace_prepared(
    workspace: Path, handed_over: tuple[Path, ...] = (), *, kept: tuple[str, ...] = ()
) -> Iterator[tuple[Path, tuple[int, int] | None, FolderMarks | None]]:
    """The support files, and the worktree (and ``handed_over``, folders the caller
    removes afterwards) handed to this command's own account (when the server is root)
    for the command's duration; the worktree is always taken back afterwards. ``kept``:
    the worktree's restored environments (relative paths), whose files need no look."""
    support = Path(tempfile.mkdtemp(prefix="autocoder-sandbox-"))
    git_pointer = _read_git_pointer(workspace)
    try:
        with sandbox_slot() as ids:
            support_files_write(support)
            if git_pointer is not None:
                git_view_prepare(workspace, support)
            marks: FolderMarks | None = None
            try:
                if ids is not None:
                    marks = _chown_tree(workspace, *ids, kept=kept)
                    for folder in handed_over:
                        _chown_tree(folder, *ids)
                yield support, ids, marks
            finally:
                # Before the slot is freed: nothing of the worktree may stay the slot's
                # (the next holder of that uid would own it).
                workspace_reclaim(workspace, git_pointer=git_pointer, kept=kept, marks=marks)
    finally:
        shutil.rmtree(support, ignore_errors=True)


def _read_git_pointer(workspace: Path) -> bytes | None:
    pointer = workspace / ".git"
    if pointer.is_file() and not pointer.is_symlink():
        return pointer.read_bytes()
    return None


def _pointer_intact(pointer: Path, content: bytes) -> bool:
    """The ``.git`` pointer is a file of its own (no symlink, no second name a command
    could keep to write through later) holding what git wrote."""
    try:
        info = os.lstat(pointer)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and pointer.read_bytes() == content


def _chown_tree(root: Path, uid: int, gid: int, *, kept: Iterable[str] = ()) -> FolderMarks:
    """Hand ``root`` to a command's account — except files with more than one name: a
    restored environment's hard links (repos/environments/store.py) are shared with the
    kept copy and other runs, and stay the storage account's. The command may still
    delete or replace them (their folders are its own), never write into them. Under
    ``kept`` (the restored environments' paths) only folders are handed over, without a
    look at their files (:func:`hand_over_kept`); the marks to take them back by."""
    tops = kept_roots(root, kept)
    for path in walk(root, prune=tops):
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(path)
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                continue
            os.chown(path, uid, gid, follow_symlinks=False)
    return hand_over_kept(tops, uid, gid)


def workspace_reclaim(
    workspace: Path,
    *,
    git_pointer: bytes | None = None,
    kept: Iterable[str] = (),
    marks: FolderMarks | None = None,
) -> None:
    """After a sandboxed command: the worktree is the storage account's again, holds no
    setuid or setgid file, and its ``.git`` is the pointer file git wrote (restored as a
    new file if the command replaced it, or linked it under another name). Under
    ``kept``, handed over with ``marks`` (:func:`_chown_tree`), the files of folders the
    command did not change are not looked at."""
    if not workspace.exists():
        return
    ids = storage_ids()
    tops = kept_roots(workspace, kept) if marks is not None else frozenset()

    def take_back(path: Path | str, info: os.stat_result) -> None:
        if ids is not None and (info.st_uid, info.st_gid) != ids:
            os.chown(path, *ids, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            return
        if info.st_mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISDIR(info.st_mode):
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))

    for path in walk(workspace, prune=tops):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        take_back(path, info)
    for kept_path, info in kept_paths_to_check(tops, marks or {}):
        with contextlib.suppress(FileNotFoundError):
            take_back(kept_path, info)
            # Nobody else may write what a command left in an environment's folder:
            # the next commands' disk watch and take-back do not look at the files of
            # folders they did not change, so those files must not be able to grow.
            if stat.S_ISREG(info.st_mode) and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                os.chmod(
                    kept_path, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH | stat.S_ISUID | stat.S_ISGID)
                )
    if git_pointer is not None:
        pointer = workspace / ".git"
        if not _pointer_intact(pointer, git_pointer):
            logger.warning("A sandboxed command replaced or linked %s; restored", pointer)
            if pointer.is_dir() and not pointer.is_symlink():
                shutil.rmtree(pointer)
            else:
                pointer.unlink(missing_ok=True)
            pointer.write_bytes(git_pointer)
            if ids is not None:
                os.chown(pointer, *ids)
