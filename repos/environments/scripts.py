"""Which setup script is in force for a repository at a commit.

The one written on the Repository page wins; otherwise the repository's own
``.autocoder/setup.sh``; otherwise a devcontainer's ``updateContentCommand`` and
``postCreateCommand`` (``.devcontainer/devcontainer.json`` or ``.devcontainer.json``).
Files are read from the commit's objects (``git cat-file``), so a symlink in the
checkout cannot make the server read a file of its own.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..git import GitAccess, run_git
from ..git import git_blob as _git_blob

CARRIED_SCRIPT = ".autocoder/setup.sh"
DEVCONTAINER_FILES = (".devcontainer/devcontainer.json", ".devcontainer.json")
# devcontainer.json's commands in the order a container runs them once made.
DEVCONTAINER_COMMANDS = ("onCreateCommand", "updateContentCommand", "postCreateCommand")
MAX_SCRIPT_BYTES = 64 * 1024


class SetupSource:
    PAGE = "page"
    REPOSITORY = CARRIED_SCRIPT
    DEVCONTAINER = "devcontainer.json"


SOURCE_LABELS = {
    SetupSource.PAGE: "the script written on this page",
    SetupSource.REPOSITORY: f"the repository's {CARRIED_SCRIPT}",
    SetupSource.DEVCONTAINER: "the repository's devcontainer.json commands",
}


@dataclass(frozen=True)
class SetupScript:
    source: str
    text: str
    # A devcontainer's image, when it names one (a base image the page may adopt).
    image: str = ""

    @property
    def label(self) -> str:
        return SOURCE_LABELS.get(self.source, self.source)


def _blob_entry(repo: Path, access: GitAccess, commit: str, path: str) -> tuple[str, str] | None:
    """(mode, object id) of ``path`` at ``commit``, or None when it is not a file there."""
    listing = run_git(["ls-tree", "-z", commit, "--", path], cwd=repo, access=access, check=False).stdout
    entry = listing.split("\x00")[0]
    if not entry:
        return None
    meta, _, _ = entry.partition("\t")
    mode, kind, object_id = meta.split(" ")
    # A symlink's blob is where it points, not a script: not one.
    if kind != "blob" or mode not in ("100644", "100755"):
        return None
    return mode, object_id


def _read(repo: Path, access: GitAccess, commit: str, path: str) -> str | None:
    entry = _blob_entry(repo, access, commit, path)
    if entry is None:
        return None
    data = _git_blob(entry[1], cwd=repo, access=access)
    if len(data) > MAX_SCRIPT_BYTES:
        return None
    return data.decode("utf-8", errors="replace")


def setup_in_force(*, page_script: str, repo: Path, access: GitAccess, commit: str) -> SetupScript | None:
    """The setup script a run from ``commit`` uses, or None when there is none."""
    if page_script.strip():
        return SetupScript(SetupSource.PAGE, page_script.strip() + "\n")
    if not commit:
        return None
    carried = _read(repo, access, commit, CARRIED_SCRIPT)
    if carried is not None and carried.strip():
        return SetupScript(SetupSource.REPOSITORY, carried)
    for path in DEVCONTAINER_FILES:
        text = _read(repo, access, commit, path)
        if text is None:
            continue
        script, image = devcontainer_setup(text)
        if script:
            return SetupScript(SetupSource.DEVCONTAINER, script, image=image)
    return None


_LINE_COMMENT = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def devcontainer_setup(text: str) -> tuple[str, str]:
    """The shell lines of a devcontainer.json's create commands, and its image.
    devcontainer.json is JSON with comments and trailing commas; a command is a string
    (shell), an array (one program and its arguments) or an object of either (run in
    parallel there; one after another here). Unreadable: nothing."""
    cleaned = _TRAILING_COMMA.sub(r"\1", _LINE_COMMENT.sub(lambda match: match.group(1) or "", text))
    try:
        document = json.loads(cleaned)
    except ValueError:
        return "", ""
    if not isinstance(document, dict):
        return "", ""
    lines: list[str] = []
    for name in DEVCONTAINER_COMMANDS:
        lines += _command_lines(document.get(name))
    image = document.get("image")
    return ("\n".join(lines) + "\n" if lines else ""), (image if isinstance(image, str) else "")


def _command_lines(command: object) -> list[str]:
    if isinstance(command, str):
        return [command] if command.strip() else []
    if isinstance(command, list) and command and all(isinstance(part, str) for part in command):
        return [shlex.join(command)]
    if isinstance(command, dict):
        return [line for value in command.values() for line in _command_lines(value)]
    return []
