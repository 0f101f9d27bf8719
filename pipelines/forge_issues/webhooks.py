"""A forge's delivery about an issue (GitHub's and Gitea's ``issues`` event, GitLab's
``issue`` hook), handed on by ``pipelines.pull_requests.webhooks.pull_request_webhook``
(its ``DELIVERY_HANDLERS``) once the signature is checked and the delivery is new."""

from __future__ import annotations

from pipelines.forge_deliveries import Delivery
from pipelines.models import ForgeIssue
from repos.forges.issues import webhook_issue

from .services import forge_issue_apply, forge_issue_login


def forge_issue_delivery(delivery: Delivery) -> str:
    """An issue opened, edited, labelled, assigned, closed or reopened: imported when it is
    ours to take, followed when it is known; "ignored" otherwise."""
    issue = webhook_issue(kind=delivery.kind, event=delivery.event, payload=delivery.payload)
    if issue is None:
        return "ignored"
    repository = delivery.repository
    known = ForgeIssue.objects.filter(repository=repository, number=issue.number).exists()
    if not known and not repository.forge_issues_wanted:
        return "ignored"
    login = forge_issue_login(repository=repository) if not known and issue.assignees else ""
    applied = forge_issue_apply(repository=repository, issue=issue, login=login)
    return "applied" if applied is not None else "ignored"
