"""The memory jobs as Celery tasks (called directly) and management commands."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import timezone

from memory import tasks
from memory.models import AgentNote, AgentNoteRevision, ContextItem, DailyLogEntry
from memory.services.context import context_save
from memory.services.notes import daily_log_record
from tests.fake_anthropic import TextReply

pytestmark = pytest.mark.django_db


def _expired_items(owner, n: int) -> None:
    for i in range(n):
        item, _ = context_save(owner=owner, type="a", content={"old": i})
        ContextItem.objects.filter(pk=item.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    context_save(owner=owner, type="a", content="live")


def _old_entries(owner, n: int, settings) -> None:
    today = timezone.localdate()
    for i in range(n):
        daily_log_record(
            owner=owner,
            agent_id="coder",
            session="run-1",
            type="x",
            day=today - timedelta(days=settings.DAILY_LOG_RETENTION_DAYS + 1 + i),
        )
    daily_log_record(owner=owner, agent_id="coder", session="run-1", type="x")


def _long_note(owner, settings) -> AgentNote:
    settings.AGENT_NOTES_MAX_CHARS = 100
    return AgentNote.objects.create(owner=owner, agent_id="coder", content="## Updates\n\n" + "y" * 200)


def test_beat_schedules_the_jobs() -> None:
    scheduled = {entry["task"] for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
    assert {
        "memory.tasks.memory_cleanup_contexts",
        "memory.tasks.memory_cleanup_daily",
        "memory.tasks.memory_summarise_notes",
    } <= scheduled


def test_cleanup_contexts_task_and_command(owner) -> None:
    _expired_items(owner, 2)
    assert tasks.memory_cleanup_contexts() == 2
    _expired_items(owner, 3)
    out = StringIO()
    call_command("memory_cleanup_contexts", stdout=out)
    assert out.getvalue().strip() == "Deleted 3 expired context item(s)."
    assert ContextItem.objects.count() == 1


def test_cleanup_daily_task_and_command(owner, settings) -> None:
    _old_entries(owner, 2, settings)
    assert tasks.memory_cleanup_daily() == 2
    _old_entries(owner, 1, settings)
    out = StringIO()
    call_command("memory_cleanup_daily", stdout=out)
    assert f"Deleted 1 daily log entry older than {settings.DAILY_LOG_RETENTION_DAYS} days." in out.getvalue()
    out = StringIO()
    call_command("memory_cleanup_daily", "--days", "0", stdout=out)
    assert "Deleted 0 daily log entries older than 0 days." in out.getvalue()
    assert DailyLogEntry.objects.count() == 2


def test_summarise_task_and_command(owner, settings, fake_llm) -> None:
    note = _long_note(owner, settings)
    fake_llm.script(TextReply(text="Short summary"))
    assert tasks.memory_summarise_notes() == 1
    note.refresh_from_db()
    assert note.content == "Short summary\n"
    assert AgentNoteRevision.objects.filter(note=note).count() == 1
    out = StringIO()
    call_command("memory_summarise_notes", stdout=out)
    assert out.getvalue().strip() == "Summarised 0 agent note(s)."


def test_summarise_one_note_task_is_idempotent(owner, settings, fake_llm) -> None:
    note = _long_note(owner, settings)
    fake_llm.script(TextReply(text="Short summary"))
    assert tasks.memory_summarise_note(note.pk) is True
    assert tasks.memory_summarise_note(note.pk) is False
    assert tasks.memory_summarise_note(999_999) is False
    assert len(fake_llm.requests) == 1


def test_appending_past_the_limit_queues_the_summary_job(
    owner, settings, fake_llm, django_capture_on_commit_callbacks
) -> None:
    from memory.services.notes import notes_append

    settings.AGENT_NOTES_MAX_CHARS = 100
    sent: list[int] = []
    real_delay = tasks.memory_summarise_note.delay
    try:
        tasks.memory_summarise_note.delay = lambda note_id: sent.append(note_id)
        with django_capture_on_commit_callbacks(execute=True):
            note = notes_append(owner=owner, agent_id="coder", text="z" * 150)
    finally:
        tasks.memory_summarise_note.delay = real_delay
    assert sent == [note.pk]
    fake_llm.script(TextReply(text="Short"))
    assert tasks.memory_summarise_note(sent[0]) is True
