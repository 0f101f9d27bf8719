"""Reads about tasks from a forge's issues."""

from __future__ import annotations

from pipelines.models import ForgeIssue


def forge_issue_closing_line(*, task_id: int) -> str:
    """What a run's pull request says so that merging it closes the task's issue: GitHub,
    GitLab and Gitea all close issue N of the same repository on "Closes #N"."""
    number = ForgeIssue.objects.filter(task_id=task_id).values_list("number", flat=True).first()
    return f"Closes #{number}" if number is not None else ""
