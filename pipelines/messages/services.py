"""Messages to a run: a person talks to the working Coder.

A message is sent while the run is active (queued, working, paused, awaiting approval);
the Coder reads it at its next turn — now if it is working, at its next round otherwise
(after a request for changes or a retry). Each message is read once: taken by the turn
that reads it (compare-and-set on ``delivered_at``), and handed again to that same turn
when the phase is resumed after its worker died, so the replies already bought are
reused (pipelines/runs/recovery.py) and nothing is read twice or lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.exceptions import Conflict
from pipelines.events import RunMessageChange, event_publish
from pipelines.models import ACTIVE_STATUSES, PipelineRun, RunMessage

if TYPE_CHECKING:
    from accounts.models import User

RUN_MESSAGE_MAX_LENGTH = 5_000
BODY_REQUIRED = "Write the message."
BODY_TOO_LONG = f"Keep the message under {RUN_MESSAGE_MAX_LENGTH:,} characters."
RUN_ENDED = "This run has ended: start a new one, and say it in the task."


class RunEnded(Conflict):
    code = "run_ended"


def run_message_send(*, run: PipelineRun, author: User | None, body: str) -> RunMessage:
    """Keep ``body`` for the run's Coder. ValidationError (by field) for bad input,
    RunEnded when the run is approved, failed or cancelled."""
    body = body.strip()
    if not body:
        raise ValidationError({"body": [BODY_REQUIRED]})
    if len(body) > RUN_MESSAGE_MAX_LENGTH:
        raise ValidationError({"body": [BODY_TOO_LONG]})
    with transaction.atomic():
        # Held, so a run ending at this moment either gets the message or refuses it.
        status = PipelineRun.objects.select_for_update().filter(pk=run.pk).values_list("status", flat=True).first()
        if status not in ACTIVE_STATUSES:
            raise RunEnded(RUN_ENDED)
        message = RunMessage.objects.create(run=run, author=author, body=body)
        event_publish(
            task=run.task, run=run, event=RunMessageChange(run_id=run.pk, message_id=message.pk, delivered=False)
        )
    return message


@dataclass(frozen=True)
class Delivered:
    body: str
    author: str


def run_messages_take(*, run: PipelineRun, phase_entry: int | None, turn: int) -> list[Delivered]:
    """The messages the Coder reads at ``turn`` of the phase entered by ``phase_entry``:
    those that turn already took (a resumed phase), then those not yet read, oldest
    first, now marked read by it."""
    if phase_entry is None:
        return []
    with transaction.atomic():
        waiting = list(
            RunMessage.objects.select_for_update()
            .filter(run=run, delivered_at__isnull=True)
            .values_list("pk", flat=True)
        )
        if waiting:
            RunMessage.objects.filter(pk__in=waiting, delivered_at__isnull=True).update(
                delivered_at=timezone.now(),
                delivered_entry=phase_entry,
                delivered_turn=turn,
                delivered_phase=run.status,
            )
        taken = list(
            RunMessage.objects.filter(run=run, delivered_entry=phase_entry, delivered_turn=turn)
            .select_related("author")
            .order_by("created_at", "id")
        )
        for message in taken:
            if message.pk in waiting:
                event_publish(
                    task=run.task,
                    run=run,
                    event=RunMessageChange(run_id=run.pk, message_id=message.pk, delivered=True),
                )
    return [Delivered(body=message.body, author=_name(message)) for message in taken]


def _name(message: RunMessage) -> str:
    author = message.author
    if author is None:
        return "a person"
    return author.display_name or author.email
