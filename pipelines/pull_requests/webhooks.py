"""A forge's webhook deliveries to a repository: the signature checked with the
repository's secret, each delivery applied once (known by its signed body), then handed to
the first handler in ``DELIVERY_HANDLERS`` that takes it. A handler gets the delivery
(``Delivery``: the repository, the forge's kind, the event's name, the decoded payload) and
answers "applied" or "ignored"; a room that follows something else on the forge (checks,
reviews, issues …) adds its handler to the table."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.crypto import decrypt_secret
from core.exceptions import ApplicationError, NotFound
from pipelines.forge_deliveries import Delivery
from pipelines.forge_issues.webhooks import forge_issue_delivery
from pipelines.models import ForgeDelivery, PullRequest
from repos.forges import (
    webhook_body_digest,
    webhook_delivery_id,
    webhook_event,
    webhook_is_authentic,
    webhook_pull_request,
)
from repos.models import Repository

from .checks import checks_delivery
from .conflicts import pull_request_update_delivery
from .reviews import forge_review_delivery
from .services import pull_request_apply

WEBHOOK_UNKNOWN = "No repository with pull requests takes webhooks here."
WEBHOOK_BAD_SIGNATURE = "The delivery's signature does not match the repository's webhook secret."


class WebhookRefused(ApplicationError):
    code = "webhook_refused"
    status_code = 401


def pull_request_state_delivery(delivery: Delivery) -> str:
    """A pull (merge) request's state changed: merged approves its run, closed cancels it."""
    info = webhook_pull_request(kind=delivery.kind, payload=delivery.payload)
    if info is None:
        return "ignored"
    pull_request = (
        PullRequest.objects.filter(run__task__project_id=delivery.repository.project_id, number=info.number)
        .select_related("run__task")
        .first()
    )
    if pull_request is None:
        return "ignored"
    pull_request_apply(pull_request=pull_request, info=info)
    return "applied"


# Tried in order; the first that does not answer "ignored" took the delivery. A review's
# delivery carries its pull request too, and an update (head or base changed) is a pull
# request event: both go before the plain state change, which takes every such event.
DELIVERY_HANDLERS: tuple[Callable[[Delivery], str], ...] = (
    forge_review_delivery,
    pull_request_update_delivery,
    pull_request_state_delivery,
    forge_issue_delivery,
    checks_delivery,
)


@sensitive_variables("secret")
def pull_request_webhook(*, repository_id: int | None, body: bytes, headers: Any) -> str:
    """Apply a forge's delivery. Returns what happened in a word: "applied", "ignored"
    (not about anything of ours) or "replayed" (the same body seen before for this
    repository, whatever its delivery id). A signature that does not match — or is not
    ASCII, or not well formed — is ``WebhookRefused``."""
    repository = Repository.objects.filter(pk=repository_id).exclude(forge_kind="").first() if repository_id else None
    secret = decrypt_secret(repository.forge_webhook_secret_encrypted) if repository else ""
    if repository is None or not secret:
        raise NotFound(WEBHOOK_UNKNOWN)
    kind = repository.forge_kind
    if not webhook_is_authentic(kind=kind, secret=secret, body=body, headers=headers):
        raise WebhookRefused(WEBHOOK_BAD_SIGNATURE)
    # Seen before: the same signed body, whatever delivery id (unsigned) comes with it.
    try:
        with transaction.atomic():
            ForgeDelivery.objects.create(
                repository=repository,
                body_sha256=webhook_body_digest(body),
                delivery_id=webhook_delivery_id(kind=kind, headers=headers),
            )
    except IntegrityError:
        return "replayed"
    try:
        payload = json.loads(body)
    except ValueError:
        return "ignored"
    if not isinstance(payload, dict):
        return "ignored"
    delivery = Delivery(
        repository=repository,
        kind=kind,
        event=webhook_event(kind=kind, headers=headers, payload=payload),
        payload=payload,
        headers=headers,
    )
    for handler in DELIVERY_HANDLERS:
        outcome = handler(delivery)
        if outcome != "ignored":
            return outcome
    return "ignored"


def forge_deliveries_forget(*, older_than_days: int | None = None) -> int:
    """Forget deliveries received more than FORGE_DELIVERY_RETENTION_DAYS ago; how many.
    A replay after that is applied again, and changes nothing: each handler applies what
    the forge says now, once (a state already recorded, a review already imported)."""
    days = settings.FORGE_DELIVERY_RETENTION_DAYS if older_than_days is None else older_than_days
    deleted, _ = ForgeDelivery.objects.filter(received_at__lt=timezone.now() - timedelta(days=days)).delete()
    return deleted
