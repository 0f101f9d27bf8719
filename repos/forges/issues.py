"""Issues on the team's forge, read and closed through ``ForgeClient.call``:

- GitHub: ``GET /repos/{o}/{r}/issues?labels=&assignee=&state=all&since=`` (its list holds
  pull requests too, each with a ``pull_request`` key: skipped), ``PATCH …/issues/{n}``
  ``{"state": "closed"}``, ``POST …/issues/{n}/comments``, ``GET /user`` → ``login``.
- Gitea/Forgejo: GitHub's shapes under /api/v1, ``type=issues`` and ``assigned_by=``
  instead of ``assignee=``, ``limit=`` instead of ``per_page=``.
- GitLab: ``GET /projects/:id/issues?labels=&assignee_username=&updated_after=``
  (``iid``, ``description``, ``state`` opened|closed, ``labels`` as names, ``web_url``),
  ``PUT …/issues/:iid`` ``{"state_event": "close"}``, ``POST …/issues/:iid/notes``,
  ``GET /user`` → ``username``.

Webhook deliveries: GitHub's and Gitea's ``issues`` event (``issue`` as in the list),
GitLab's ``issue`` hook (``object_attributes``, with ``labels`` and ``assignees`` beside it).
Everything read here is the forge's users' text: bounded here, never trusted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .client import ForgeClient
from .errors import ForgeKind

PAGE_SIZE = 50
TITLE_MAX_CHARS = 255
BODY_MAX_CHARS = 20_000
NAME_MAX_CHARS = 255


@dataclass(frozen=True)
class IssueInfo:
    number: int
    url: str
    title: str
    body: str
    state: str  # "open" | "closed"
    labels: tuple[str, ...]
    assignees: tuple[str, ...]
    updated_at: str  # the forge's ISO 8601 stamp


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _link(value: Any) -> str:
    """A web link the pages may show: http(s) only."""
    text = _text(value, 1000)
    return text if text.startswith(("https://", "http://")) else ""


def _names(items: Any, key: str) -> tuple[str, ...]:
    names = []
    for item in items if isinstance(items, list) else []:
        name = item.get(key) if isinstance(item, Mapping) else item
        if isinstance(name, str) and name:
            names.append(name[:NAME_MAX_CHARS])
    return tuple(names[:50])


def github_issue(data: Mapping[str, Any]) -> IssueInfo | None:
    """A GitHub or Gitea issue (None for a pull request, or something malformed)."""
    if data.get("pull_request"):
        return None
    try:
        number = int(data["number"])
    except (KeyError, TypeError, ValueError):
        return None
    return IssueInfo(
        number=number,
        url=_link(data.get("html_url")),
        title=_text(data.get("title"), TITLE_MAX_CHARS),
        body=_text(data.get("body"), BODY_MAX_CHARS),
        state="closed" if data.get("state") == "closed" else "open",
        labels=_names(data.get("labels"), "name"),
        assignees=_names(data.get("assignees"), "login"),
        updated_at=_text(data.get("updated_at"), 64),
    )


def gitlab_issue(data: Mapping[str, Any], *, labels: Any = None, assignees: Any = None) -> IssueInfo | None:
    """A GitLab issue from the API (``labels``: names) or a hook's ``object_attributes``
    (``labels`` and ``assignees`` given from beside it: objects with ``title``/``username``)."""
    try:
        number = int(data["iid"])
    except (KeyError, TypeError, ValueError):
        return None
    if labels is None:
        labels = data.get("labels")
    if assignees is None:
        assignees = data.get("assignees")
    return IssueInfo(
        number=number,
        url=_link(data.get("web_url") or data.get("url")),
        title=_text(data.get("title"), TITLE_MAX_CHARS),
        body=_text(data.get("description"), BODY_MAX_CHARS),
        state="closed" if data.get("state") == "closed" else "open",
        labels=_names(labels, "title"),
        assignees=_names(assignees, "username"),
        updated_at=_text(data.get("updated_at"), 64),
    )


def _issues_path(client: ForgeClient, number: int | None = None) -> str:
    if client.kind == ForgeKind.GITLAB:
        base = f"/projects/{quote(client.repository, safe='')}/issues"
    else:
        base = f"/repos/{client.repository}/issues"
    return base if number is None else f"{base}/{number}"


def _query(client: ForgeClient, *, label: str, assignee: str, since: str) -> dict[str, str | int]:
    query: dict[str, str | int] = {}
    if client.kind == ForgeKind.GITLAB:
        query.update(state="all", order_by="updated_at", sort="asc")
        if label:
            query["labels"] = label
        if assignee:
            query["assignee_username"] = assignee
        if since:
            query["updated_after"] = since
        return query
    query["state"] = "all"
    if client.kind == ForgeKind.GITEA:
        query["type"] = "issues"
        if assignee:
            query["assigned_by"] = assignee
    else:
        query.update(sort="updated", direction="asc")
        if assignee:
            query["assignee"] = assignee
    if label:
        query["labels"] = label
    if since:
        query["since"] = since
    return query


def issues_list(client: ForgeClient, *, label: str = "", assignee: str = "", since: str = "") -> list[IssueInfo]:
    """The issues (no pull requests) with ``label`` or assigned to ``assignee``, open or
    closed, updated at or after ``since`` (the forge's stamp; '' all). ForgeError as
    ``call`` raises it: nothing is returned from a poll that failed half way."""
    found: dict[int, IssueInfo] = {}
    query = _query(client, label=label, assignee=assignee, since=since)
    for item in client.call_pages(_issues_path(client), params=query, page_size=PAGE_SIZE):
        issue = gitlab_issue(item) if client.kind == ForgeKind.GITLAB else github_issue(item)
        if issue is not None:
            found[issue.number] = issue
    return list(found.values())


def forge_account_login(client: ForgeClient) -> str:
    """The login of the account the token belongs to (GitLab's ``username``)."""
    data = client.call("GET", "/user")
    if not isinstance(data, Mapping):
        return ""
    key = "username" if client.kind == ForgeKind.GITLAB else "login"
    return _text(data.get(key), NAME_MAX_CHARS)


def issue_close(client: ForgeClient, number: int, *, comment: str) -> None:
    """Say why in a comment, then close the issue. Both are safe to repeat."""
    if client.kind == ForgeKind.GITLAB:
        client.call("POST", _issues_path(client, number) + "/notes", {"body": comment})
        client.call("PUT", _issues_path(client, number), {"state_event": "close"})
        return
    client.call("POST", _issues_path(client, number) + "/comments", {"body": comment})
    client.call("PATCH", _issues_path(client, number), {"state": "closed"})


ISSUE_EVENTS = frozenset({"issues", "issue", "issue_label", "issue_assign"})


def webhook_issue(*, kind: str, event: str, payload: Mapping[str, Any]) -> IssueInfo | None:
    """The issue a delivery is about, as it is now (None: not an issue's event)."""
    if event not in ISSUE_EVENTS:
        return None
    if kind == ForgeKind.GITLAB:
        attributes = payload.get("object_attributes")
        if not isinstance(attributes, Mapping):
            return None
        return gitlab_issue(attributes, labels=payload.get("labels") or [], assignees=payload.get("assignees") or [])
    issue = payload.get("issue")
    return github_issue(issue) if isinstance(issue, Mapping) else None


def commit_web_url(*, kind: str, issue_url: str, commit: str) -> str:
    """The page of ``commit`` in the repository the issue at ``issue_url`` belongs to
    (GitHub, Gitea: <repository>/issues/N → <repository>/commit/<sha>; GitLab:
    <project>/-/issues/N → <project>/-/commit/<sha>); '' when the URL is not an issue's."""
    marker = "/-/issues/" if kind == ForgeKind.GITLAB else "/issues/"
    base, found, _ = issue_url.rpartition(marker)
    if not found or not base.startswith(("https://", "http://")):
        return ""
    return f"{base}{'/-' if kind == ForgeKind.GITLAB else ''}/commit/{commit}"
