"""``POST /_control/base``: someone's change lands on a repository's base branch on the
fake forge — a commit writing ``content`` to ``path`` on ``branch`` (default main) of its
bare git dir — and, given a webhook URL and secret, each open pull request into that
branch is announced as updated (GitHub/Gitea ``pull_request`` "synchronize", GitLab's
merge request "update"), as the forge tells its webhooks. Whether a pull request now
conflicts is what its answers say (mergeability.py)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .answers import Answer, control_answer
from .pulls import state_payload
from .state import ForgeState

AUTHOR = {"GIT_AUTHOR_NAME": "Someone", "GIT_AUTHOR_EMAIL": "someone@example.com"}


def _git(git_dir: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> str:
    trusted = f"safe.directory={git_dir.resolve()}"
    done = subprocess.run(  # noqa: S603
        ["git", "-c", trusted, *args],  # noqa: S607
        cwd=git_dir,
        input=input,
        capture_output=True,
        check=True,
        env={**os.environ, **AUTHOR, "GIT_COMMITTER_NAME": "Someone", "GIT_COMMITTER_EMAIL": "someone@example.com"}
        | (env or {}),
    )
    return done.stdout.decode().strip()


def move_base(git_dir: Path, branch: str, path: str, content: str, message: str) -> str:
    """Commit ``content`` at ``path`` on ``branch`` of a bare repository (no checkout:
    git's plumbing with an index of its own); the new commit."""
    old = _git(git_dir, "rev-parse", "--verify", f"refs/heads/{branch}")
    blob = _git(git_dir, "hash-object", "-w", "--stdin", input=content.encode())
    with tempfile.TemporaryDirectory() as folder:
        index = {"GIT_INDEX_FILE": str(Path(folder) / "index")}
        _git(git_dir, "read-tree", old, env=index)
        _git(git_dir, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=index)
        tree = _git(git_dir, "write-tree", env=index)
    new = _git(git_dir, "commit-tree", tree, "-p", old, "-m", message)
    _git(git_dir, "update-ref", f"refs/heads/{branch}", new, old)
    return new


def control_base(forge: ForgeState, body: dict[str, Any]) -> Answer:
    try:
        name, path, content = str(body["repository"]), str(body["path"]), str(body["content"])
    except KeyError as error:
        return 400, {"message": f"repository, path and content are required ({error})"}
    branch, message = str(body.get("branch") or "main"), str(body.get("message") or f"Change {path}")
    with forge.lock:
        repository = forge.repositories.get(name)
        if repository is None or repository.git_dir is None:
            return 404, {"message": "No such repository with a git dir on this forge."}
        try:
            commit = move_base(repository.git_dir, branch, path, content, message)
        except subprocess.CalledProcessError as error:
            return 422, {"message": f"git refused: {error.stderr.decode(errors='replace')[-300:]}"}
        numbers = [n for n, pull in repository.pulls.items() if pull.base == branch and pull.state == "open"]
    kind = str(body.get("kind") or "github")
    events = []
    for number in numbers:
        with forge.lock:
            event, payload = state_payload(forge, kind, name, number)
        if kind == "gitlab":
            payload["object_attributes"]["action"] = "update"
        else:
            payload["action"] = "synchronize"
        events.append((event, payload))
    return control_answer(body, kind, events, {"commit": commit, "pulls": numbers})


ROUTES: list[Any] = []
CONTROLS = {"/_control/base": control_base}
