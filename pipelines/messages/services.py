"""Messages to a run: a person talks to the working agent.

A message is sent while the run is active (queued, working, paused, awaiting approval);
the agent working reads it at its next turn (the Coder in its editing loop, the Planner
or Reviewer at its next call) — now if the run is working, at its next round otherwise
(after a request for changes or a retry). The Claude CLI's Coder works as one call: it
reads what waits as it starts, and a message sent meanwhile waits for the next round.
Each message is read once: taken by the turn that reads it (compare-and-set on
``delivered_at``), and handed again to that same turn when the phase is resumed after
its worker died, so the replies already bought are reused (pipelines/runs/recovery.py)
and nothing is read twice or lost.
"""

from __future__ import annotations

from collections.abc import Collection
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
    pk: int
    body: str
    author: str


def run_messages_take(
    *,
    run: PipelineRun,
    agent: str,
    phase_entry: int | None,
    turn: int,
    replaying: bool = False,
    heard: Collection[int] = (),
) -> list[Delivered]:
    """The messages ``agent`` reads at ``turn`` of the phase entered by ``phase_entry``,
    oldest first; ``heard``: those this attempt at the phase has read already.

    Each message is read once: taken with a compare-and-set on ``delivered_at``, so two
    workers never both take it. A phase resumed after its worker died is handed again
    what the dead worker had taken: while it is ``replaying`` (reusing the replies it
    bought, which compare the prompt's text) only what that turn took before, so the
    prompt is the same; once it buys again, all it took and has not heard yet (a resumed
    conversation that went another way still reads them), then what is waiting."""
    if phase_entry is None:
        return []
    mine = RunMessage.objects.filter(run=run, delivered_entry=phase_entry, delivered_agent=agent).exclude(
        pk__in=list(heard)
    )
    with transaction.atomic():
        if replaying:
            return [_delivered(message) for message in mine.filter(delivered_turn=turn).select_related("author")]
        # Read now, at this turn: a later replay asks this turn's question with them.
        mine.exclude(delivered_turn=turn).update(delivered_turn=turn)
        waiting = list(
            RunMessage.objects.filter(run=run, delivered_at__isnull=True)
            .order_by("created_at", "id")
            .values_list("pk", flat=True)
        )
        now = timezone.now()
        newly = [
            pk
            for pk in waiting
            # Compare-and-set: a message another worker took meanwhile is its own.
            if RunMessage.objects.filter(pk=pk, delivered_at__isnull=True).update(
                delivered_at=now,
                delivered_entry=phase_entry,
                delivered_turn=turn,
                delivered_phase=run.status,
                delivered_agent=agent,
            )
        ]
        taken = list(mine.filter(delivered_turn=turn).select_related("author").order_by("created_at", "id"))
        for pk in newly:
            event_publish(task=run.task, run=run, event=RunMessageChange(run_id=run.pk, message_id=pk, delivered=True))
    return [_delivered(message) for message in taken]


def _delivered(message: RunMessage) -> Delivered:
    return Delivered(pk=message.pk, body=message.body, author=_name(message))


def _name(message: RunMessage) -> str:
    author = message.author
    if author is None:
        return "a person"
    return author.display_name or author.email
