"""What the fake forge's route modules share: the request a handler gets, the common
refusals, and the signed webhook delivery the forge sends."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .state import FakeRepository, ForgeState

Answer = tuple[int, Any]


@dataclass(frozen=True)
class Redirect:
    """An answer's body that is a redirect (GitHub's job logs: 302 to a download URL)."""

    location: str


@dataclass(frozen=True)
class ForgeRequest:
    forge: ForgeState
    kind: str  # github, gitea, gitlab
    method: str
    match: re.Match[str]
    repository: FakeRepository | None  # the route's ``repo`` group, when it has one
    body: Any
    query: dict[str, str]
    may_write: bool
    token: str


Handler = Callable[[ForgeRequest], Answer]
Route = tuple[str, str, str, Handler]  # family, method, pattern, handler
Control = Callable[["ForgeState", dict[str, Any]], Answer]
# A download outside the API (no token: its URL is the grant), given the path's match.
Download = Callable[["ForgeState", re.Match[str], dict[str, str]], Answer]


def not_found(kind: str) -> Answer:
    return 404, {"message": "404 Not found" if kind == "gitlab" else "Not Found"}


def forbidden(kind: str) -> Answer:
    if kind == "gitlab":
        return 403, {"message": "403 Forbidden"}
    return 403, {"message": "Resource not accessible by personal access token"}


def signed_delivery(kind: str, event: str, payload: Mapping[str, Any], secret: str) -> tuple[bytes, dict[str, str]]:
    """The body and headers the forge would POST to a webhook: GitHub and Gitea sign the
    body (HMAC-SHA256), GitLab sends the secret itself. ``event`` is GitHub's and Gitea's
    event name (``pull_request``, ``check_run`` …) or GitLab's hook name (``Merge Request
    Hook``, ``Pipeline Hook`` …)."""
    body = json.dumps(payload).encode()
    delivery = str(uuid.uuid4())
    if kind == "gitlab":
        return body, {"X-Gitlab-Event": event, "X-Gitlab-Token": secret, "X-Gitlab-Event-UUID": delivery}
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if kind == "github":
        return body, {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": "sha256=" + signature,
        }
    return body, {"X-Gitea-Event": event, "X-Gitea-Delivery": delivery, "X-Gitea-Signature": signature}


def deliver(url: str, body: bytes, headers: Mapping[str, str]) -> int:
    """POST a delivery to a webhook URL; its HTTP status."""
    request = urllib.request.Request(url, body, {**headers, "Content-Type": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (http(s) only: checked)
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def control_deliver(control: Mapping[str, Any], kind: str, event: str, payload: Mapping[str, Any]) -> Answer | None:
    """Deliver ``payload`` to the webhook a control request names (``webhook``, ``secret``);
    None when it names none, else the answer's part to add (or a 400)."""
    if not control.get("webhook"):
        return None
    url = str(control["webhook"])
    if not url.startswith(("http://", "https://")):
        return 400, {"message": "webhook must be an http(s) URL"}
    body, headers = signed_delivery(kind, event, payload, str(control.get("secret", "")))
    return 200, {"webhook_status": deliver(url, body, headers)}


def control_answer(
    control: Mapping[str, Any], kind: str, events: Sequence[tuple[str, Any]], answer: dict[str, Any]
) -> Answer:
    """A control's answer: ``answer`` and, when the control names a webhook, each of
    ``events`` delivered to it in order — ``webhook_status`` the first's HTTP status,
    ``webhook_statuses`` all of them (a bad webhook URL: that 400)."""
    for event, payload in events:
        delivered = control_deliver(control, kind, event, payload)
        if delivered is None:
            break
        if delivered[0] != 200:
            return delivered
        answer.setdefault("webhook_status", delivered[1]["webhook_status"])
        answer.setdefault("webhook_statuses", []).append(delivered[1]["webhook_status"])
    return 200, answer
