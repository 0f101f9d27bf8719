"""What the task's card shows of a pull request's CI (``Task.pipeline_state["pull_request"]
["checks"]``, written by ``services.publish_pull_request``): the checks of the head the
forge has, or — new commits pushed after a round — that their checks are awaited."""

from __future__ import annotations

from typing import Any

from pipelines.models import PullRequest

NEW_COMMITS_AWAIT_CHECKS = "New commits pushed: awaiting their checks."


def pull_request_checks_card(pull_request: PullRequest) -> dict[str, Any] | None:
    if not pull_request.checks:
        return None
    if pull_request.pushed_head and pull_request.checks_head != pull_request.pushed_head:
        return {"state": "pending", "checks": [], "missing": [], "message": NEW_COMMITS_AWAIT_CHECKS}
    return dict(pull_request.checks)
