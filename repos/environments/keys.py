"""An environment's key: what, when it changes, makes a prepared environment stale.

The setup script as it runs, the base image, and the manifests and lockfiles at the
commit (``ENVIRONMENT_KEY_FILES``: names matched at any depth, by their object ids, so
nothing is read but one ``git ls-tree``). A run whose change touches one of them gets a
new key, and prepares again for its own worktree.
"""

from __future__ import annotations

import fnmatch
import hashlib
from pathlib import Path

from django.conf import settings

from ..git import GitAccess, run_git

KEY_VERSION = "autocoder-environment-1"


def key_files(*, repo: Path, access: GitAccess, commit: str) -> list[tuple[str, str]]:
    """(path, object id) of every file at ``commit`` whose name is a key file's."""
    patterns = tuple(settings.ENVIRONMENT_KEY_FILES)
    listing = run_git(["ls-tree", "-r", "-z", "--full-tree", commit], cwd=repo, access=access).stdout
    found: list[tuple[str, str]] = []
    for entry in listing.split("\x00"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        name = path.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(path, pattern) for pattern in patterns):
            found.append((path, meta.split(" ")[-1]))
    return sorted(found)


def environment_key(*, script: str, image: str, files: list[tuple[str, str]]) -> str:
    digest = hashlib.sha256(KEY_VERSION.encode())
    for part in (script, image, *(f"{path}\x00{object_id}" for path, object_id in files)):
        digest.update(b"\x00\x01" + part.encode("utf-8", errors="replace"))
    return digest.hexdigest()
