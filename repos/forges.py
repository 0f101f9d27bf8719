"""Pull requests on a team's forge — GitHub, GitLab, Gitea/Forgejo — through their
documented REST APIs, by API base URL (so GitHub Enterprise and self-hosted instances
work), with ``httpx2`` (the HTTP client the anthropic SDK already brings).

Each forge answers two questions: open a pull (merge) request from a pushed branch, and
what state one is in now (open, merged, closed). Failures come back as ``ForgeError``
with a message that says what to do, and ``retryable`` when trying again later may
work (the forge was unreachable or failing). The token is sent in a header and never
appears in a message, a log line or an exception.

The server connects only to public addresses, or to networks an operator allows
(CLONE_ALLOWED_NETWORKS, as for clones): the host is resolved, every address checked,
and the request made to the checked address (Host and TLS SNI keep the name), so a name
that changes its answer between the check and the connection cannot point the server at
an internal service. Redirects are not followed; proxies from the environment are not
used.

Webhooks: ``webhook_is_authentic`` checks a delivery's signature the way each forge
signs it (GitHub: HMAC-SHA256 in X-Hub-Signature-256; Gitea/Forgejo: HMAC-SHA256 hex in
X-Gitea-Signature / X-Forgejo-Signature; GitLab: the secret token itself in
X-Gitlab-Token), and ``webhook_pull_request`` reads which pull request it is about and its
state.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx2
from django.db import models
from django.views.decorators.debug import sensitive_variables

from .clone import address_allowed

TIMEOUT_SECONDS = 15.0


class ForgeKind(models.TextChoices):
    GITHUB = "github", "GitHub"
    GITLAB = "gitlab", "GitLab"
    GITEA = "gitea", "Gitea / Forgejo"


class PullRequestState(models.TextChoices):
    OPEN = "open", "Open"
    MERGED = "merged", "Merged"
    CLOSED = "closed", "Closed"


@dataclass(frozen=True)
class PullRequestInfo:
    number: int
    url: str
    state: str  # PullRequestState


class ForgeError(Exception):
    """A forge refused or could not be reached. ``code`` names the case for the API."""

    def __init__(self, message: str, *, code: str, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable
        self.status = status


# What each forge calls the token's permission to open pull requests.
SCOPE_HINTS = {
    ForgeKind.GITHUB: "a fine-grained token with “Pull requests: write” and “Contents: write”, or a classic one "
    "with “repo”",
    ForgeKind.GITLAB: "the “api” scope and at least the Developer role",
    ForgeKind.GITEA: "the “write:repository” scope",
}


class ForgeClient:
    """One forge, one repository on it (``owner/name``, or a GitLab project's path)."""

    kind: ForgeKind

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

    # --- the same for all

    def open_pull_request(self, *, head: str, base: str, title: str, body: str) -> PullRequestInfo:
        path, payload = self._create_request(head=head, base=base, title=title, body=body)
        return self._info(self._call("POST", path, payload))

    def pull_request(self, number: int) -> PullRequestInfo:
        return self._info(self._call("GET", self._get_path(number)))

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Mapping[str, Any]:
        url, host, extensions = self._pinned(self.api_url + path)
        headers = {"Accept": "application/json", "User-Agent": "AutoCoder", "Host": host, **self._auth_headers()}
        try:
            with httpx2.Client(timeout=TIMEOUT_SECONDS, transport=self._transport, trust_env=False) as client:
                response = client.request(method, url, json=payload, headers=headers, extensions=extensions)
        except httpx2.HTTPError as error:
            raise ForgeError(
                f"{self.kind.label} at {self.api_url} could not be reached ({type(error).__name__}). "
                "Try again later; the branch stays pushed.",
                code="forge_unreachable",
                retryable=True,
            ) from None  # the exception's request carries the token in its headers
        if response.is_success:
            data = response.json()
            if not isinstance(data, Mapping):
                raise ForgeError(f"{self.kind.label} answered with something other than an object.", code="forge_error")
            return data
        raise self._error(response)

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


def _plain_host(host: str, *, bracketed: bool) -> bool:
    """An IPv6 literal, or a name in ASCII letters, digits, dots, hyphens and underscores:
    the Host header and TLS name are sent as they are, and must be ASCII."""
    if bracketed or ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return "%" not in host  # no zone: an interface of this server's
    return host.isascii() and all(ch.isalnum() or ch in "._-" for ch in host)


def forge_host_check(url: str) -> str:
    """The address to connect to for ``url``, after checking that every address its
    host resolves to is public or in an allowed network; ForgeError otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # not a URL: a bracket left open, a port past 65535 …
        parts, port = urlsplit(""), 0
    if parts.scheme not in ("https", "http") or not parts.hostname or not port:
        raise ForgeError(f"The forge's API URL {url} is not an http(s) URL.", code="forge_bad_url")
    if not _plain_host(parts.hostname, bracketed="[" in parts.netloc):
        raise ForgeError(
            f"Write the forge's host in ASCII (an international name in its xn-- form): {url}", code="forge_bad_url"
        )
    try:
        addresses = list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(parts.hostname, port)))
    except (socket.gaierror, UnicodeError):
        raise ForgeError(
            f"The forge's host {parts.hostname} does not resolve. Check the API URL, or try again later.",
            code="forge_unreachable",
            retryable=True,
        ) from None
    if not addresses or not all(address_allowed(address) for address in addresses):
        raise ForgeError(
            f"The forge's host {parts.hostname} is on an internal address, which the server does not connect "
            "to (an operator can allow networks with CLONE_ALLOWED_NETWORKS).",
            code="forge_host_not_allowed",
        )
    return addresses[0]


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
        return PullRequestInfo(number=int(data["number"]), url=str(data["html_url"]), state=_open_or_merged(data))


class Gitea(GitHub):
    """Gitea and Forgejo API v1 (<host>/api/v1): GitHub's shapes, its own token header."""

    kind = ForgeKind.GITEA

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self._token}"}


def _open_or_merged(data: Mapping[str, Any]) -> str:
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


CLIENTS: dict[str, type[ForgeClient]] = {ForgeKind.GITHUB: GitHub, ForgeKind.GITLAB: GitLab, ForgeKind.GITEA: Gitea}


def forge_client(
    *, kind: str, api_url: str, repository: str, token: str, transport: httpx2.BaseTransport | None = None
) -> ForgeClient:
    return CLIENTS[kind](api_url=api_url, repository=repository, token=token, transport=transport)


# --- Webhooks ------------------------------------------------------------------------------


@sensitive_variables("secret")
def _hmac_hex(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _same(given: str, expected: str) -> bool:
    """Constant-time equality of a header's value and the expected one, as bytes: a
    value that is not ASCII (``compare_digest`` refuses such ``str``) or not well formed
    is simply not equal."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


@sensitive_variables("secret")
def webhook_is_authentic(*, kind: str, secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether a delivery was signed with ``secret`` (``headers`` as Django's
    ``request.headers``: case-insensitive). No secret: nothing is authentic."""
    if not secret:
        return False
    if kind == ForgeKind.GITHUB:
        given = headers.get("X-Hub-Signature-256", "")
        return _same(given, "sha256=" + _hmac_hex(secret, body))
    if kind == ForgeKind.GITEA:
        given = headers.get("X-Gitea-Signature") or headers.get("X-Forgejo-Signature") or ""
        return _same(given, _hmac_hex(secret, body))
    if kind == ForgeKind.GITLAB:
        return _same(headers.get("X-Gitlab-Token", ""), secret)
    return False


def webhook_delivery_id(*, kind: str, headers: Mapping[str, str]) -> str:
    """The forge's id of a delivery, '' if none. Only a label: the forges do not sign
    it, so a captured delivery can be sent again with any id (``webhook_body_digest``
    is what tells a delivery seen before)."""
    names: dict[str, tuple[str, ...]] = {
        ForgeKind.GITHUB: ("X-GitHub-Delivery",),
        ForgeKind.GITEA: ("X-Gitea-Delivery", "X-Forgejo-Delivery"),
        ForgeKind.GITLAB: ("X-Gitlab-Event-UUID", "Idempotency-Key"),
    }
    for name in names.get(kind, ()):
        if headers.get(name):
            return headers[name][:100]
    return ""


def webhook_body_digest(body: bytes) -> str:
    """What identifies a delivery: the SHA-256 (hex) of its body, which the signature
    covers (GitHub, Gitea/Forgejo) — a replay carries the same body whatever its headers.
    GitLab's token signs nothing, so its body is all there is to go on too. The forges'
    bodies carry the pull request's ``updated_at``, so two real events never share one."""
    return hashlib.sha256(body).hexdigest()


def webhook_pull_request(*, kind: str, payload: Mapping[str, Any]) -> PullRequestInfo | None:
    """The pull request a delivery is about and its state now, or None when the
    delivery is about something else (a push, a comment …)."""
    try:
        if kind == ForgeKind.GITLAB:
            if payload.get("object_kind") != "merge_request":
                return None
            attributes = payload["object_attributes"]
            return GitLab(api_url="", repository="", token="")._info(
                {"iid": attributes["iid"], "web_url": attributes.get("url", ""), "state": attributes.get("state")}
            )
        pull = payload.get("pull_request")
        if not isinstance(pull, Mapping):
            return None
        return PullRequestInfo(
            number=int(pull["number"]), url=str(pull.get("html_url", "")), state=_open_or_merged(pull)
        )
    except (KeyError, TypeError, ValueError):
        return None
