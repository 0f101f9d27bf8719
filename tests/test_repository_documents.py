"""What the repository's files point a reader at is in the repository: a clone, a
container image or CI's checkout has nothing beside it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from django.conf import settings

# Written in pieces so that this file does not name them itself.
OUTSIDE_DOCUMENTS = ("../" + "shared/", "PIT" + "FALLS.md", "STY" + "LE.md")


def test_no_file_points_at_a_document_outside_the_repository() -> None:
    root = Path(settings.BASE_DIR)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    pointing = []
    for name in tracked.decode().split("\0"):
        path = root / name
        if not name or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        pointing += [f"{name}: {document}" for document in OUTSIDE_DOCUMENTS if document in text]
    assert not pointing, pointing
