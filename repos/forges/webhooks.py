"""Forge webhooks: ``webhook_is_authentic`` checks a delivery's signature the way each
forge signs it (GitHub: HMAC-SHA256 in X-Hub-Signature-256; Gitea/Forgejo: HMAC-SHA256 hex
in X-Gitea-Signature / X-Forgejo-Signature; GitLab: the secret token itself in
X-Gitlab-Token), ``webhook_event`` says what a delivery is about, and
``webhook_pull_request`` reads which pull request it is about and its state."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from django.views.decorators.debug import sensitive_variables

from .client import GitLab, open_or_merged
from .errors import ForgeKind, PullRequestInfo


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
            number=int(pull["number"]), url=str(pull.get("html_url", "")), state=open_or_merged(pull)
        )
    except (KeyError, TypeError, ValueError):
        return None


def webhook_event(*, kind: str, headers: Mapping[str, str], payload: Mapping[str, Any]) -> str:
    """What a delivery is about, in the forge's own word: GitHub's and Gitea's event
    header (``pull_request``, ``check_run``, ``issues`` …; Forgejo's header on Forgejo),
    GitLab's ``object_kind`` (``merge_request``, ``pipeline``, ``note`` …). '' if unsaid."""
    if kind == ForgeKind.GITLAB:
        return str(payload.get("object_kind") or "")
    names = ("X-GitHub-Event",) if kind == ForgeKind.GITHUB else ("X-Gitea-Event", "X-Forgejo-Event")
    return next((headers[name] for name in names if headers.get(name)), "")
