"""Whether a pull request conflicts with its base, as the forge computes it:

- GitHub (``GET /repos/{o}/{r}/pulls/{n}``): ``mergeable`` true/false, or null while a
  background job computes it; ``mergeable_state`` "dirty" when it conflicts;
- Gitea/Forgejo (the same path): ``mergeable`` true/false;
- GitLab (``GET /projects/:id/merge_requests/:iid``): ``has_conflicts``, and
  ``detailed_merge_status`` "conflict" (older ones: ``merge_status`` "cannot_be_merged",
  which says only that it cannot merge, not why — not read as a conflict).

Unknown (still computing, or an answer without the fields) is None: nothing is done on
it, the next webhook or poll asks again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from .client import ForgeClient
from .errors import ForgeError, ForgeKind


def mergeability_path(kind: str, repository: str, number: int) -> str:
    if kind == ForgeKind.GITLAB:
        return f"/projects/{quote(repository, safe='')}/merge_requests/{number}"
    return f"/repos/{repository}/pulls/{number}"


def conflicting_from(kind: str, data: Mapping[str, Any]) -> bool | None:
    """What one pull (merge) request's answer says of conflicts: True, False or None."""
    if kind == ForgeKind.GITLAB:
        if data.get("detailed_merge_status") == "conflict" or data.get("has_conflicts") is True:
            return True
        if data.get("has_conflicts") is False:
            return False
        return None
    if data.get("mergeable_state") == "dirty":
        return True
    mergeable = data.get("mergeable")
    return (not mergeable) if isinstance(mergeable, bool) else None


def pull_request_conflicting(*, client: ForgeClient, number: int) -> bool | None:
    """Ask the forge whether pull request ``number`` conflicts with its base now."""
    data = client.call("GET", mergeability_path(client.kind, client.repository, number))
    if not isinstance(data, Mapping):
        raise ForgeError(f"{client.kind.label} answered with something other than an object.", code="forge_error")
    return conflicting_from(client.kind, data)
