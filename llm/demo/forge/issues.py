"""Issues on the fake forge: GitHub's and Gitea's ``/repos/{o}/{r}/issues`` (GitHub's list
holds the pull requests too, each with a ``pull_request`` key; Gitea's ``type=issues``
leaves them out), GitLab's ``/projects/:id/issues``; their filters (labels, state,
assignee, updated since), pages, edits and closing, comments (GitLab: notes), and
``GET /user`` (the token's account). A merged pull request whose body says "Closes #N"
closes issue N, as the forges do (``close_referenced``).

``POST /_control/issue`` plays a person on the forge: {kind, repository, title, body,
labels, assignee?, state?, number? (to edit or close that one)} and, given {webhook,
secret}, delivers the issue's event as the forge would."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .answers import Answer, ForgeRequest, control_answer, forbidden, not_found
from .state import FakePull, FakeRepository, ForgeState, now_stamp

CLOSES = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s+#(\d+)", re.IGNORECASE)


@dataclass
class FakeIssue:
    number: int
    title: str
    body: str
    labels: list[str] = field(default_factory=list)
    assignees: list[str] = field(default_factory=list)
    state: str = "open"  # open, closed
    comments: list[str] = field(default_factory=list)
    updated_at: str = field(default_factory=now_stamp)


def _web_url(forge: ForgeState, kind: str, repository: str, number: int) -> str:
    word = "-/issues" if kind == "gitlab" else "issues"
    return f"http://127.0.0.1:{forge.port}/{kind}-web/{repository}/{word}/{number}"


def issue_answer(forge: ForgeState, kind: str, repository: str, issue: FakeIssue) -> dict[str, Any]:
    if kind == "gitlab":
        return {
            "iid": issue.number,
            "title": issue.title,
            "description": issue.body,
            "state": "opened" if issue.state == "open" else "closed",
            "labels": list(issue.labels),
            "assignees": [{"username": name} for name in issue.assignees],
            "web_url": _web_url(forge, kind, repository, issue.number),
            "updated_at": issue.updated_at,
        }
    return {
        "number": issue.number,
        "title": issue.title,
        "body": issue.body,
        "state": issue.state,
        "labels": [{"name": name} for name in issue.labels],
        "assignees": [{"login": name} for name in issue.assignees],
        "html_url": _web_url(forge, kind, repository, issue.number),
        "updated_at": issue.updated_at,
        "pull_request": None,
    }


def _pull_as_issue(forge: ForgeState, repository: str, pull: FakePull) -> dict[str, Any]:
    """A pull request in GitHub's issues list: an issue with a ``pull_request`` key."""
    return {
        "number": pull.number,
        "title": pull.title,
        "body": pull.body,
        "state": "open" if pull.state == "open" else "closed",
        "labels": [],
        "assignees": [],
        "html_url": forge.html_url("github", repository, pull.number),
        "updated_at": pull.updated_at,
        "pull_request": {"url": forge.html_url("github", repository, pull.number)},
    }


def _stamp(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _list(request: ForgeRequest) -> Answer:
    repository, kind, query = request.repository, request.kind, request.query
    assert repository is not None
    gitlab = kind == "gitlab"
    wanted_state = query.get("state", "opened" if gitlab else "open")
    wanted_labels = [label for label in query.get("labels", "").split(",") if label]
    assignee = query.get("assignee_username" if gitlab else "assigned_by" if kind == "gitea" else "assignee", "")
    since = _stamp(query.get("updated_after" if gitlab else "since", "") or "-")
    issues = list(repository.issues.values())
    if wanted_state in ("open", "opened", "closed"):
        issues = [i for i in issues if i.state == ("closed" if wanted_state == "closed" else "open")]
    if wanted_labels:
        issues = [i for i in issues if all(label in i.labels for label in wanted_labels)]
    if assignee:
        issues = [i for i in issues if assignee in i.assignees]
    if since is not None:
        issues = [i for i in issues if (_stamp(i.updated_at) or since) >= since]
    answers = [(i.updated_at, i.number, issue_answer(request.forge, kind, repository.name, i)) for i in issues]
    if kind == "github" and not wanted_labels and not assignee:
        # GitHub's issues list holds the pull requests too (a label or assignee filter
        # would leave the fake's, which have none, out anyway).
        pulls = list(repository.pulls.values())
        answers += [(p.updated_at, p.number, _pull_as_issue(request.forge, repository.name, p)) for p in pulls]
    ascending = query.get("direction") == "asc" or query.get("sort") == "asc"
    if ascending:
        answers.sort(key=lambda item: (item[0], item[1]))
    else:
        answers.sort(key=lambda item: item[1], reverse=True)
    return 200, [answer for _, _, answer in answers]  # the server pages it


def _one(request: ForgeRequest) -> FakeIssue | None:
    assert request.repository is not None
    return request.repository.issues.get(int(request.match["number"]))


def _get(request: ForgeRequest) -> Answer:
    issue = _one(request)
    if issue is None:
        return not_found(request.kind)
    assert request.repository is not None
    return 200, issue_answer(request.forge, request.kind, request.repository.name, issue)


def _edit(request: ForgeRequest) -> Answer:
    """GitHub/Gitea ``PATCH`` {state, title, body}; GitLab ``PUT`` {state_event, title, description}."""
    issue = _one(request)
    if issue is None:
        return not_found(request.kind)
    if not request.may_write:
        return forbidden(request.kind)
    body = request.body
    if request.kind == "gitlab":
        event = body.get("state_event")
        if event in ("close", "reopen"):
            issue.state = "closed" if event == "close" else "open"
        text = body.get("description")
    else:
        if body.get("state") in ("open", "closed"):
            issue.state = body["state"]
        text = body.get("body")
    if isinstance(body.get("title"), str):
        issue.title = body["title"]
    if isinstance(text, str):
        issue.body = text
    issue.updated_at = now_stamp()
    assert request.repository is not None
    return 200, issue_answer(request.forge, request.kind, request.repository.name, issue)


def comment(request: ForgeRequest) -> Answer:
    issue = _one(request)
    if issue is None:
        return not_found(request.kind)
    if not request.may_write:
        return forbidden(request.kind)
    text = request.body.get("body")
    if not isinstance(text, str) or not text:
        return 422, {"message": "body is required"}
    issue.comments.append(text)
    issue.updated_at = now_stamp()
    return 201, {"id": len(issue.comments), "body": text}


def close_referenced(forge: ForgeState, repository: FakeRepository, pull: FakePull) -> list[int]:
    """A merged pull request closes the issues its body says it closes."""
    closed = []
    for number in {int(n) for n in CLOSES.findall(pull.body)}:
        issue = repository.issues.get(number)
        if issue is not None and issue.state == "open":
            issue.state, issue.updated_at = "closed", now_stamp()
            closed.append(number)
    return closed


def person_edits(forge: ForgeState, repository: str, body: dict[str, Any]) -> tuple[FakeIssue, str]:
    """A person opens, edits, labels, assigns, closes or reopens an issue; the issue and
    GitHub's word for what happened."""
    issues = forge.repositories[repository].issues
    number = body.get("number")
    if number is None:
        number = max([*issues, *forge.repositories[repository].pulls], default=0) + 1
        issues[number] = FakeIssue(number=number, title=str(body.get("title", "")), body=str(body.get("body", "")))
        action = "opened"
    else:
        number = int(number)
        if number not in issues:
            raise KeyError(f"no issue {number}")
        action = "edited"
    issue = issues[number]
    if action == "edited":
        if "title" in body:
            issue.title = str(body["title"])
        if "body" in body:
            issue.body = str(body["body"])
    if "labels" in body:
        labels = [str(label) for label in body["labels"] or []]
        if action == "edited" and labels != issue.labels:
            action = "labeled" if len(labels) > len(issue.labels) else "unlabeled"
        issue.labels = labels
    if "assignee" in body:
        issue.assignees = [str(body["assignee"])] if body["assignee"] else []
        action = "assigned" if action == "edited" and issue.assignees else action
    if body.get("state") in ("open", "closed") and body["state"] != issue.state:
        issue.state = body["state"]
        action = "closed" if issue.state == "closed" else "reopened"
    issue.updated_at = now_stamp()
    return issue, action


GITLAB_ACTIONS = {"opened": "open", "closed": "close", "reopened": "reopen"}


def issue_event(forge: ForgeState, kind: str, repository: str, issue: FakeIssue, action: str) -> tuple[str, Any]:
    """The event name and payload the forge sends for an issue's change."""
    if kind == "gitlab":
        attributes = {
            **issue_answer(forge, kind, repository, issue),
            "url": _web_url(forge, kind, repository, issue.number),
            "action": GITLAB_ACTIONS.get(action, "update"),
        }
        del attributes["labels"], attributes["assignees"]
        return "Issue Hook", {
            "object_kind": "issue",
            "event_type": "issue",
            "project": {"path_with_namespace": repository},
            "object_attributes": attributes,
            "labels": [{"title": name} for name in issue.labels],
            "assignees": [{"username": name} for name in issue.assignees],
        }
    return "issues", {
        "action": action,
        "issue": issue_answer(forge, kind, repository, issue),
        "repository": {"full_name": repository},
        "sender": {"login": "someone"},
    }


def control_issue(forge: ForgeState, body: dict[str, Any]) -> Answer:
    try:
        kind, repository = str(body["kind"]), str(body["repository"])
        with forge.lock:
            issue, action = person_edits(forge, repository, body)
            event, payload = issue_event(forge, kind, repository, issue, action)
    except (KeyError, TypeError, ValueError) as error:
        return 400, {"message": f"kind, repository and a title or number are required ({error})"}
    return control_answer(
        body, kind, [(event, payload)], {"number": issue.number, "action": action, "state": issue.state}
    )


GITHUB_ISSUES = r"/repos/(?P<repo>[^/]+/[^/]+)/issues"
GITLAB_ISSUES = r"/projects/(?P<repo>[^/]+)/issues"

ROUTES = [
    ("github", "GET", GITHUB_ISSUES, _list),
    ("github", "GET", GITHUB_ISSUES + r"/(?P<number>\d+)", _get),
    ("github", "PATCH", GITHUB_ISSUES + r"/(?P<number>\d+)", _edit),
    ("github", "POST", GITHUB_ISSUES + r"/(?P<number>\d+)/comments", comment),
    ("gitlab", "GET", GITLAB_ISSUES, _list),
    ("gitlab", "GET", GITLAB_ISSUES + r"/(?P<number>\d+)", _get),
    ("gitlab", "PUT", GITLAB_ISSUES + r"/(?P<number>\d+)", _edit),
    ("gitlab", "POST", GITLAB_ISSUES + r"/(?P<number>\d+)/notes", comment),
]
CONTROLS = {"/_control/issue": control_issue}
