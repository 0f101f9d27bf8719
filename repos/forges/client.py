"""Pull requests on a team's forge — GitHub, GitLab, Gitea/Forgejo — through their
documented REST APIs, by API base URL (so GitHub Enterprise and self-hosted instances
work), with ``httpx2`` (the HTTP client the anthropic SDK already brings).

``ForgeClient.call`` is the one way any forge module talks to a forge (``call_pages``
reads a whole listing through it, page by page): the address
checked and pinned (``hosts.forge_host_check``), the token in a header and never in a
message, a log line or an exception, redirects not followed, proxies from the environment
not used, and failures as ``ForgeError`` with a message that says what to do and
``retryable`` when trying again later may work. The subclasses say what each forge
differs in; feature modules beside this one (checks, reviews, issues …) build their
requests on ``call`` and ``kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx2

from .errors import SCOPE_HINTS, ForgeError, ForgeKind, PullRequestInfo, PullRequestState
from .hosts import forge_host_check

TIMEOUT_SECONDS = 15.0
# A listing is read page by page up to this many pages (the rest comes at the next poll).
MAX_PAGES = 10


class ForgeClient:
    """One forge, one repository on it (``owner/name``, or a GitLab project's path)."""

    kind: ForgeKind
    # Page sizes: GitHub and GitLab allow 100 a page; Gitea 50 unless its admin raised it.
    page_size_param = "per_page"
    page_size_max = 100

    def __init__(self, *, api_url: str, repository: str, token: str, transport: httpx2.BaseTransport | None = None):
        self.api_url = api_url.rstrip("/")
        self.repository = repository.strip("/")
        self._token = token
        self._transport = transport

    # --- what a forge differs in

    def _auth_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _create_request(self, *, head: str, base: str, title: str, body: str) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _get_path(self, number: int) -> str:
        raise NotImplementedError

    def _info(self, data: Mapping[str, Any]) -> PullRequestInfo:
        raise NotImplementedError

    def _open_ones_request(self, head: str) -> tuple[str, dict[str, str | int]]:
        """The path and query listing open pull requests from ``head`` (as narrowly as
        the forge can filter)."""
        raise NotImplementedError

    def _head_of(self, data: Mapping[str, Any]) -> str:
        raise NotImplementedError

    # --- the same for all

    def open_pull_request(self, *, head: str, base: str, title: str, body: str) -> PullRequestInfo:
        path, payload = self._create_request(head=head, base=base, title=title, body=body)
        return self._info(self._object(self.call("POST", path, payload)))

    def pull_request(self, number: int) -> PullRequestInfo:
        return self._info(self._object(self.call("GET", self._get_path(number))))

    def open_pull_request_from(self, head: str) -> PullRequestInfo | None:
        """The open pull request whose head is the branch ``head`` of this repository —
        one a person opened by hand — or None."""
        path, query = self._open_ones_request(head)
        found = self.call("GET", path, params=query)
        for data in found if isinstance(found, list) else []:
            if isinstance(data, Mapping) and self._head_of(data) == head:
                return self._info(data)
        return None

    def _object(self, data: Any) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise ForgeError(f"{self.kind.label} answered with something other than an object.", code="forge_error")
        return data

    def call(
        self, method: str, path: str, payload: Any = None, *, params: Mapping[str, str | int] | None = None
    ) -> Any:
        """``method`` on ``path`` (after the API base URL) with a JSON ``payload``; the
        decoded JSON answer (an object or a list; None for an empty body)."""
        return self._decoded(self._send(method, path, payload, params=params))

    def call_pages(
        self,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        key: str = "",
        page_size: int = 0,
        max_pages: int = MAX_PAGES,
    ) -> list[Mapping[str, Any]]:
        """Every item of the listing at ``path`` (the list under ``key`` when the forge
        wraps it in an object, as GitHub's check runs), page after page while the forge's
        ``Link`` header names a next one — GitHub, GitLab and Gitea all send it — or, from
        a forge (or proxy) that sends none, while pages come back full."""
        size = page_size or self.page_size_max
        found: list[Mapping[str, Any]] = []
        for page in range(1, max_pages + 1):
            query = {**(params or {}), self.page_size_param: size, "page": page}
            response = self._send("GET", path, None, params=query)
            data = self._decoded(response)
            items = data.get(key) if key and isinstance(data, Mapping) else data
            items = [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []
            found.extend(items)
            if "link" in response.headers:
                if "next" not in response.links:
                    break
            elif len(items) < size:
                break
        return found

    def _send(self, method: str, path: str, payload: Any, *, params: Mapping[str, str | int] | None) -> httpx2.Response:
        url, host, extensions = self._pinned(self.api_url + path)
        headers = {"Accept": "application/json", "User-Agent": "AutoCoder", "Host": host, **self._auth_headers()}
        try:
            with httpx2.Client(timeout=TIMEOUT_SECONDS, transport=self._transport, trust_env=False) as client:
                response = client.request(
                    method, url, json=payload, params=params, headers=headers, extensions=extensions
                )
        except httpx2.HTTPError as error:
            raise ForgeError(
                f"{self.kind.label} at {self.api_url} could not be reached ({type(error).__name__}). "
                "Try again later; the branch stays pushed.",
                code="forge_unreachable",
                retryable=True,
            ) from None  # the exception's request carries the token in its headers
        if not response.is_success:
            raise self._error(response)
        return response

    def _decoded(self, response: httpx2.Response) -> Any:
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ForgeError(
                f"{self.kind.label} answered with something other than JSON.", code="forge_error"
            ) from None

    def _pinned(self, url: str) -> tuple[str, str, dict[str, Any]]:
        """The URL with its host replaced by a checked address, the Host header, and
        the TLS server name."""
        address = forge_host_check(url)  # first: ForgeError for a URL urlsplit cannot read
        parts = urlsplit(url)
        literal = f"[{address}]" if ":" in address else address
        port = parts.port or (443 if parts.scheme == "https" else 80)
        pinned = urlunsplit(parts._replace(netloc=f"{literal}:{port}"))
        extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
        return pinned, parts.netloc.rsplit("@", 1)[-1], extensions

    def _error(self, response: httpx2.Response) -> ForgeError:
        status = response.status_code
        said = _forge_message(response)
        if status == 401:
            return ForgeError(
                f"{self.kind.label} refused the access token{said}. Check that it is right and has not expired, "
                "then save it again on the repository's page.",
                code="forge_token_refused",
                status=status,
            )
        if status == 403:
            return ForgeError(
                f"The access token may not open pull requests on {self.repository}{said}: it needs "
                f"{SCOPE_HINTS[self.kind]}. Branch protection can also refuse it.",
                code="forge_forbidden",
                status=status,
            )
        if status == 404:
            return ForgeError(
                f"{self.kind.label} has no repository {self.repository} (or pull request) that this token can see"
                f"{said}. Check the repository's name and the token's access.",
                code="forge_not_found",
                status=status,
            )
        if status in (409, 422):
            return ForgeError(f"{self.kind.label} refused the pull request{said}.", code="forge_refused", status=status)
        if status == 429 or status >= 500:
            return ForgeError(
                f"{self.kind.label} is failing or limiting requests (HTTP {status}). Try again later; the branch "
                "stays pushed.",
                code="forge_unavailable",
                retryable=True,
                status=status,
            )
        return ForgeError(f"{self.kind.label} answered HTTP {status}{said}.", code="forge_error", status=status)


def _forge_message(response: httpx2.Response) -> str:
    """What the forge said, briefly: GitHub's message and errors, GitLab's message,
    Gitea's message."""
    try:
        data = response.json()
    except ValueError:
        return ""
    if not isinstance(data, Mapping):
        return ""
    parts = []
    message = data.get("message")
    if isinstance(message, str | list):
        parts.append(message if isinstance(message, str) else "; ".join(map(str, message)))
    for error in data.get("errors") or []:
        if isinstance(error, Mapping) and error.get("message"):
            parts.append(str(error["message"]))
        elif isinstance(error, str):
            parts.append(error)
    text = "; ".join(part for part in parts if part)[:300]
    return f" (it said: {text})" if text else ""


class GitHub(ForgeClient):
    """REST API v3: https://docs.github.com/en/rest/pulls/pulls (Enterprise: <host>/api/v3)."""

    kind = ForgeKind.GITHUB

    def _auth_headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }

    def _create_request(self, *, head: str, base: str, title: str, body: str) -> tuple[str, dict[str, Any]]:
        return f"/repos/{self.repository}/pulls", {"title": title, "body": body, "head": head, "base": base}

    def _get_path(self, number: int) -> str:
        return f"/repos/{self.repository}/pulls/{number}"

    def _info(self, data: Mapping[str, Any]) -> PullRequestInfo:
        return PullRequestInfo(number=int(data["number"]), url=str(data["html_url"]), state=open_or_merged(data))

    def _open_ones_request(self, head: str) -> tuple[str, dict[str, str | int]]:
        # GitHub filters by "owner:branch"; the head must be of this repository, not a fork.
        owner = self.repository.split("/", 1)[0]
        return f"/repos/{self.repository}/pulls", {"state": "open", "head": f"{owner}:{head}", "per_page": 100}

    def _head_of(self, data: Mapping[str, Any]) -> str:
        head = data.get("head")
        if not isinstance(head, Mapping):
            return ""
        # A fork's branch of the same name is not the run's branch.
        repo = head.get("repo")
        if isinstance(repo, Mapping) and repo.get("full_name") and repo["full_name"] != self.repository:
            return ""
        return str(head.get("ref") or "")


class Gitea(GitHub):
    """Gitea and Forgejo API v1 (<host>/api/v1): GitHub's shapes, its own token header."""

    kind = ForgeKind.GITEA
    page_size_param = "limit"
    page_size_max = 50

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self._token}"}

    def _open_ones_request(self, head: str) -> tuple[str, dict[str, str | int]]:
        # Gitea lists without a head filter: the newest open ones, matched here.
        return f"/repos/{self.repository}/pulls", {"state": "open", "sort": "recentupdate", "limit": 50}


def open_or_merged(data: Mapping[str, Any]) -> str:
    if data.get("merged") or data.get("merged_at"):
        return PullRequestState.MERGED
    return PullRequestState.OPEN if data.get("state") == "open" else PullRequestState.CLOSED


class GitLab(ForgeClient):
    """REST API v4 merge requests: https://docs.gitlab.com/api/merge_requests/
    (<host>/api/v4); the repository is the project's path, URL-encoded."""

    kind = ForgeKind.GITLAB

    def _auth_headers(self) -> dict[str, str]:
        return {"PRIVATE-TOKEN": self._token}

    def _project(self) -> str:
        return quote(self.repository, safe="")

    def _create_request(self, *, head: str, base: str, title: str, body: str) -> tuple[str, dict[str, Any]]:
        payload = {"source_branch": head, "target_branch": base, "title": title, "description": body}
        return f"/projects/{self._project()}/merge_requests", payload

    def _get_path(self, number: int) -> str:
        return f"/projects/{self._project()}/merge_requests/{number}"

    def _info(self, data: Mapping[str, Any]) -> PullRequestInfo:
        state = {"merged": PullRequestState.MERGED, "opened": PullRequestState.OPEN}.get(
            str(data.get("state")), PullRequestState.CLOSED
        )
        return PullRequestInfo(number=int(data["iid"]), url=str(data["web_url"]), state=state)

    def _open_ones_request(self, head: str) -> tuple[str, dict[str, str | int]]:
        return f"/projects/{self._project()}/merge_requests", {"state": "opened", "source_branch": head}

    def _head_of(self, data: Mapping[str, Any]) -> str:
        # A merge request from a fork has another source project.
        if data.get("source_project_id") not in (None, data.get("target_project_id")):
            return ""
        return str(data.get("source_branch") or "")


CLIENTS: dict[str, type[ForgeClient]] = {ForgeKind.GITHUB: GitHub, ForgeKind.GITLAB: GitLab, ForgeKind.GITEA: Gitea}


def forge_client(
    *, kind: str, api_url: str, repository: str, token: str, transport: httpx2.BaseTransport | None = None
) -> ForgeClient:
    return CLIENTS[kind](api_url=api_url, repository=repository, token=token, transport=transport)
