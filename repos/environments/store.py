"""Prepared environments on disk, under ``ENVIRONMENTS_ROOT/<repository id>/``:

- ``cache/``: the repository's package caches (pip, uv, npm, …), which setup sees at
  ``/cache``: a second setup downloads nothing it has downloaded before;
- ``builds/``: the worktrees setup runs in, removed once its output is kept;
- ``prepared/<key>/``: what a setup produced (the untracked and ignored paths it left in
  the worktree), moved there whole.

A run gets them as hard links (``cp -al``), made by the storage account: a 200 MB
``node_modules`` in well under a second, nothing downloaded. The kept files belong to
the storage account and nobody else may write them; the sandbox hands a command only
the files of a worktree that are not hard links (core/sandbox_handover.py ``_chown_tree``), so a
command may delete or replace a restored file (what package managers do) but never
write into the kept one that other runs share.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from core.sandbox_accounts import as_storage_account, storage_ids

from ..paths import check_path

RESTORE_SKIPPED_EXISTS = "the checkout has its own"
RESTORE_SKIPPED_PATH = "its folder is a link or not a folder in this checkout"
RESTORE_FAILED = "could not be restored: {detail}"


def repository_folder(repository_id: int) -> Path:
    return Path(settings.ENVIRONMENTS_ROOT) / str(repository_id)


def package_cache(repository_id: int) -> Path:
    folder = repository_folder(repository_id) / "cache"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def build_folder(repository_id: int, key: str) -> Path:
    folder = repository_folder(repository_id) / "builds"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{key[:16]}-{secrets.token_hex(4)}"


def prepared_folder(repository_id: int, key: str) -> Path:
    return repository_folder(repository_id) / "prepared" / key


def _kept_mode(info: os.stat_result) -> int:
    """Readable (and, where the owner may run it, runnable) by the commands of every
    run, writable by nobody but the storage account; no setuid or setgid."""
    mode = stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID | stat.S_IWGRP | stat.S_IWOTH)
    mode |= stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
    if stat.S_ISDIR(info.st_mode) or mode & stat.S_IXUSR:
        mode |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
    return mode


def _make_kept(root: Path) -> tuple[int, int]:
    """The kept files' owner and modes (see _kept_mode); (bytes, files) under root."""
    ids = storage_ids()
    size = count = 0
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        for name in (*dirnames, *filenames):
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if ids is not None and (info.st_uid, info.st_gid) != ids:
                os.chown(path, *ids, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                continue
            wanted = _kept_mode(info)
            if wanted != stat.S_IMODE(info.st_mode):
                os.chmod(path, wanted)
            if not stat.S_ISDIR(info.st_mode):
                size += info.st_size
                count += 1
    return size, count


def capture(*, build: Path, paths: list[str], target: Path) -> tuple[int, int]:
    """Move what setup produced (``paths``, relative, as git listed them) from the
    worktree it ran in to ``target``; (bytes, files) kept. Paths whose folders are not
    plain folders of the build (a link made by setup) are left behind."""
    staging = target.with_name(target.name + f".partial-{secrets.token_hex(4)}")
    staging.mkdir(parents=True)
    for relative in paths:
        source = build / relative
        if not _plain_parents(build, relative) or not os.path.lexists(source):
            continue
        destination = staging / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source, destination)
    size, count = _make_kept(staging)
    if target.exists():
        remove(target)
    os.rename(staging, target)
    return size, count


def _plain_parents(root: Path, relative: str) -> bool:
    """Every folder on the way to ``relative`` under ``root`` is a real folder (no link)."""
    if check_path(relative) is not None:
        return False
    current = root
    for part in Path(relative).parts[:-1]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return True  # made by the copy, as a plain folder
        if not stat.S_ISDIR(info.st_mode):
            return False
    return True


@dataclass
class Restored:
    paths: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    milliseconds: int = 0


def restore(*, kept: Path, paths: list[str], worktree: Path) -> Restored:
    """Hard links of the kept files in ``worktree``, made as the storage account (it
    cannot write anywhere a link in the checkout would lead). A path the checkout
    already has is left as it is: the repository's own files win."""
    started = time.monotonic()
    result = Restored()
    for relative in paths:
        relative = relative.rstrip("/")
        source = kept / relative
        destination = worktree / relative
        if not os.path.lexists(source):
            continue
        if os.path.lexists(destination):
            result.skipped.append((relative, RESTORE_SKIPPED_EXISTS))
            continue
        if not _plain_parents(worktree, relative):
            result.skipped.append((relative, RESTORE_SKIPPED_PATH))
            continue
        process = subprocess.run(  # noqa: S603 - fixed program, our own paths, as the storage account
            [
                *as_storage_account(),
                "/bin/sh",
                "-c",
                'mkdir -p -- "$(dirname -- "$2")" && exec cp -al --no-target-directory -- "$1" "$2"',
                "restore",
                str(source),
                str(destination),
            ],
            capture_output=True,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            check=False,
        )
        if process.returncode != 0:
            detail = process.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:] or ["no output"]
            result.skipped.append((relative, RESTORE_FAILED.format(detail=detail[0][:200])))
            continue
        result.paths.append(relative)
    result.milliseconds = int((time.monotonic() - started) * 1000)
    return result


def intact(*, kept: Path, relative: str, worktree: Path) -> bool:
    """Whether ``relative`` in ``worktree`` still has every entry of the kept one (a
    ``git clean`` takes only the part of a folder the repository does not ignore: a
    ``.venv`` whose ``lib/`` a ``lib/`` rule ignores keeps ``lib`` and loses ``bin``)."""
    source = kept / relative
    destination = worktree / relative
    if not os.path.lexists(destination):
        return False
    if not _plain_parents(worktree, relative):
        return True  # not ours to look into; restore() would refuse it anyway
    if not source.is_dir() or source.is_symlink():
        return True
    for folder, dirnames, filenames in os.walk(source, followlinks=False):
        inside = Path(folder).relative_to(source)
        for name in (*dirnames, *filenames):
            if not os.path.lexists(destination / inside / name):
                return False
    return True


def remove_from_worktree(worktree: Path, relative: str) -> None:
    """Take a restored path out of a worktree (a link made in its place is removed, never
    followed)."""
    if not _plain_parents(worktree, relative):
        return
    path = worktree / relative
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def remove(path: Path) -> None:
    """Gone at once for anyone looking it up (renamed aside), then deleted: a run that
    holds hard links of its files keeps them."""
    if not os.path.lexists(path):
        return
    trash = Path(settings.ENVIRONMENTS_ROOT) / ".trash" / f"{path.name}-{secrets.token_hex(6)}"
    trash.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(path, trash)
    except OSError:
        trash = path
    shutil.rmtree(trash, ignore_errors=True)
