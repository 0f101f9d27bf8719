"""Whether a fake pull request conflicts with its base, in each forge's fields: GitHub's
``mergeable`` and ``mergeable_state`` ("dirty" on a conflict, "clean" otherwise), Gitea's
``mergeable``, GitLab's ``has_conflicts`` and ``detailed_merge_status`` ("conflict" or
"mergeable"). Computed as the forges do, by merging the head into the base in the
repository's bare git dir (``git merge-tree``, nothing written to a branch); a repository
without one is mergeable. ``set_conflicting`` fixes the answer for a test that has no
git dir."""

from __future__ import annotations

import subprocess
from typing import Any

from .state import FakePull, ForgeState


def set_conflicting(forge: ForgeState, repository: str, number: int, conflicting: bool | None) -> None:
    """Fix what the forge says of pull request ``number`` (None: compute it again)."""
    overrides: dict[tuple[str, int], bool] = forge.__dict__.setdefault("conflicting_pulls", {})
    if conflicting is None:
        overrides.pop((repository, number), None)
    else:
        overrides[(repository, number)] = conflicting


def conflicting(forge: ForgeState, repository: str, pull: FakePull) -> bool:
    overrides: dict[tuple[str, int], bool] = forge.__dict__.get("conflicting_pulls", {})
    if (repository, pull.number) in overrides:
        return overrides[(repository, pull.number)]
    fake = forge.repositories.get(repository)
    if fake is None or fake.git_dir is None or pull.state != "open":
        return False
    trusted = f"safe.directory={fake.git_dir.resolve()}"
    heads = [f"refs/heads/{pull.base}", f"refs/heads/{pull.head}"]
    merge = ["git", "-c", trusted, "merge-tree", "--write-tree", "--name-only", "--no-messages", *heads]
    merged = subprocess.run(merge, cwd=fake.git_dir, capture_output=True)  # noqa: S603
    return merged.returncode == 1


def mergeable_fields(forge: ForgeState, kind: str, repository: str, pull: FakePull) -> dict[str, Any]:
    """The fields of a pull (merge) request's answer that say whether it conflicts."""
    conflicts = conflicting(forge, repository, pull)
    if kind == "gitlab":
        return {"has_conflicts": conflicts, "detailed_merge_status": "conflict" if conflicts else "mergeable"}
    if kind == "gitea":
        return {"mergeable": not conflicts}
    return {"mergeable": not conflicts, "mergeable_state": "dirty" if conflicts else "clean"}
