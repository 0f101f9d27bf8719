"""Agent notes (long-term markdown per user and agent: global, and per project) and
daily logs of agent calls."""

from __future__ import annotations

import logging
from datetime import date, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.functions import Length
from django.utils import timezone

from core.exceptions import ApplicationError, Conflict, NotFound, SandboxUnavailable
from core.jobs import enqueue_on_commit
from llm.providers import provider_default_model, provider_for
from llm.providers.base import LLMRequest, ProviderError
from memory.models import AgentNote, AgentNoteRevision, DailyLogEntry
from memory.references import referenced_memory_ids
from projects.selectors import PROJECT_NOT_FOUND

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project

logger = logging.getLogger(__name__)

UPDATES_HEADING = "## Updates"
TEXT_REQUIRED = "Write something to add to the notes."
ENTRY_NOT_FOUND = "No such daily log entry."
ALREADY_PROMOTED = "This entry is already in the notes."
PROMOTE_NEEDS_ONE = "Give either entry_id or text."
INVALID_OUTPUT = "Invalid output: "
SUMMARY_REASON = "Summarised: longer than {limit:,} characters"
SUMMARY_SYSTEM = (
    "You maintain an AI coding agent's long-term notes. Rewrite the notes you are given as "
    "concise markdown that keeps every durable insight, decision, convention and pitfall, "
    "drops repetition and one-off details, and ends with a '## Updates' section. "
    "A token like [memory:12] stands for a memory the team keeps, shown in its current "
    "wording wherever the notes are read: copy every such token verbatim, on a line of its "
    "own kind (e.g. '- Learned: [memory:12]'), never change its number, never invent one. "
    "Answer with the notes only."
)

# Pipeline call outcomes → daily log status. An invalid answer is an error whose
# message says so (the log has no separate status for it).
OUTCOME_STATUS = {
    "ok": DailyLogEntry.Status.OK,
    "invalid": DailyLogEntry.Status.ERROR,
    "error": DailyLogEntry.Status.ERROR,
    "cancelled": DailyLogEntry.Status.CANCELLED,
}


def _append_update(content: str, text: str, heading: str) -> str:
    body = content.rstrip()
    if UPDATES_HEADING not in body:
        body = f"{body}\n\n{UPDATES_HEADING}" if body else UPDATES_HEADING
    return f"{body}\n\n### {heading}\n\n{text.strip()}\n"


def _summarise_on_commit(note: AgentNote) -> None:
    if len(note.content) > settings.AGENT_NOTES_MAX_CHARS:
        enqueue_on_commit("memory.tasks.memory_summarise_note", note.pk)


def _check_project(owner: User, project: Project | None) -> None:
    # Callers look the project up among the owner's; this keeps a note out of another
    # user's project whatever the caller.
    if project is not None and project.owner_id != owner.pk:
        raise NotFound(PROJECT_NOT_FOUND)


def notes_append(
    *, owner: User, agent_id: str, text: str, source: str = "", project: Project | None = None
) -> AgentNote:
    """Add ``text`` under "## Updates" with a timestamp heading, to the agent's global
    notes or to its notes in ``project`` (one of the owner's). Notes that grow past
    AGENT_NOTES_MAX_CHARS are summarised by a Celery job queued on commit."""
    if not text or not text.strip():
        raise ValidationError({"text": [TEXT_REQUIRED]})
    _check_project(owner, project)
    heading = timezone.now().strftime("%Y-%m-%d %H:%M UTC") + (f" · {source}" if source else "")
    with transaction.atomic():
        note, _ = AgentNote.objects.get_or_create(owner=owner, agent_id=agent_id, project=project)
        note = AgentNote.objects.select_for_update().get(pk=note.pk)
        note.content = _append_update(note.content, text, heading)
        note.save(update_fields=["content", "updated_at"])
        _summarise_on_commit(note)
    return note


def _entry_insight(entry: DailyLogEntry) -> str:
    what = f"{entry.type or 'task'} in {entry.session} ({entry.get_status_display().lower()}, {entry.duration_ms} ms)"
    if entry.error:
        return f"{what}: {entry.error}"
    if entry.output_context_id:
        return f"{what}: output `{entry.output_context_id}`"
    return what


def notes_promote(
    *,
    owner: User,
    agent_id: str,
    entry_id: int | None = None,
    text: str | None = None,
    project: Project | None = None,
) -> AgentNote:
    """Move an insight from the daily log into the notes (global, or ``project``'s): a
    daily log entry (marked promoted, once) or free text."""
    if (entry_id is None) == (not text):
        raise ApplicationError(PROMOTE_NEEDS_ONE)
    _check_project(owner, project)
    with transaction.atomic():
        if entry_id is None:
            return notes_append(owner=owner, agent_id=agent_id, text=text or "", source="promoted", project=project)
        entry = DailyLogEntry.objects.select_for_update().filter(owner=owner, agent_id=agent_id, pk=entry_id).first()
        if entry is None:
            raise NotFound(ENTRY_NOT_FOUND)
        if entry.promoted:
            raise Conflict(ALREADY_PROMOTED)
        entry.promoted = True
        entry.save(update_fields=["promoted"])
        return notes_append(
            owner=owner,
            agent_id=agent_id,
            text=text or _entry_insight(entry),
            source=f"promoted from {entry.date}",
            project=project,
        )


def _without_invented_references(summary: str, original: str) -> str:
    """The summary without the lines that name a memory the notes never named: a
    reference the model made up would put an unrelated memory into every prompt."""
    named = referenced_memory_ids(original)
    return "\n".join(line for line in summary.splitlines() if referenced_memory_ids(line) <= named)


def notes_summarise(*, note_id: int) -> bool:
    """Replace notes longer than AGENT_NOTES_MAX_CHARS by an LLM summary, keeping the
    original as a revision. Each note (global, or one project's) is summarised on its
    own, so a project's lessons never move into another's notes; references to
    memories are kept as tokens. Idempotent: short (or already summarised) notes are left
    alone. A provider error leaves the notes unchanged and is logged."""
    limit = settings.AGENT_NOTES_MAX_CHARS
    note = AgentNote.objects.select_related("project").filter(pk=note_id).first()
    if note is None or len(note.content) <= limit:
        return False
    original = note.content
    which = f"in the project “{note.project.name}”" if note.project is not None else "for every project"
    provider = provider_for()
    request = LLMRequest(
        system=SUMMARY_SYSTEM,
        messages=[{"role": "user", "content": f"Notes of the {note.agent_id} agent {which}:\n\n{original}"}],
        model=provider_default_model(),
        max_tokens=min(settings.LLM_MAX_TOKENS, 8192),
    )
    # The LLM call is slow I/O: outside any transaction.
    try:
        result = provider.complete(request, on_chunk=lambda chunk: None, should_cancel=lambda: False)
    except (ProviderError, SandboxUnavailable) as exc:
        # SandboxUnavailable: the Claude CLI provider runs every call sandboxed.
        logger.warning("Notes %s of %s: summary failed, notes kept: %s", note.pk, note.agent_id, exc.message)
        return False
    summary = _without_invented_references(result.text, original).strip()
    if not summary:
        logger.warning("Notes %s of %s: the summary was empty, notes kept", note.pk, note.agent_id)
        return False
    with transaction.atomic():
        locked = AgentNote.objects.select_for_update().get(pk=note.pk)
        if locked.content != original:
            # Appended to meanwhile: the next run summarises the newer notes.
            return False
        AgentNoteRevision.objects.create(note=locked, content=original, reason=SUMMARY_REASON.format(limit=limit))
        locked.content = summary + "\n"
        locked.save(update_fields=["content", "updated_at"])
    return True


def notes_summarise_long() -> int:
    """Summarise every note past the limit; returns how many were summarised."""
    ids = list(
        AgentNote.objects.annotate(chars=Length("content"))
        .filter(chars__gt=settings.AGENT_NOTES_MAX_CHARS)
        .values_list("pk", flat=True)
    )
    return sum(1 for note_id in ids if notes_summarise(note_id=note_id))


# --- Daily logs ------------------------------------------------------------------------------


def daily_log_record(
    *,
    owner: User,
    agent_id: str,
    session: str,
    type: str,
    input_context_ids: list[str] | None = None,
    output_context_id: str = "",
    duration_ms: int = 0,
    outcome: str = "ok",
    error: str = "",
    day: date | None = None,
) -> DailyLogEntry:
    status = OUTCOME_STATUS.get(outcome, DailyLogEntry.Status.ERROR)
    if outcome == "invalid":
        error = INVALID_OUTPUT + error
    return DailyLogEntry.objects.create(
        owner=owner,
        agent_id=agent_id,
        date=day or timezone.localdate(),
        session=session[:100],
        type=type[:50],
        input_context_ids=input_context_ids or [],
        output_context_id=output_context_id,
        duration_ms=max(0, duration_ms),
        status=status,
        error=error[:5000],
    )


def daily_cleanup_old(*, retention_days: int | None = None, today: date | None = None) -> int:
    """Delete daily log entries older than ``retention_days``; returns the count."""
    days = settings.DAILY_LOG_RETENTION_DAYS if retention_days is None else retention_days
    cutoff = (today or timezone.localdate()) - timedelta(days=days)
    deleted, _ = DailyLogEntry.objects.filter(date__lt=cutoff).delete()
    return deleted
