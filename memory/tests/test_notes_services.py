"""Agent notes: append, promote, summarise (fake LLM); daily log cleanup."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from core.exceptions import Conflict, NotFound
from memory.models import AgentNote, AgentNoteRevision, DailyLogEntry
from memory.selectors.notes import daily_log_markdown, notes_markdown
from memory.services.notes import (
    SUMMARY_REASON,
    UPDATES_HEADING,
    daily_cleanup_old,
    daily_log_record,
    notes_append,
    notes_promote,
    notes_summarise,
    notes_summarise_long,
)
from tests.fake_anthropic import HttpError, TextReply

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch) -> list[int]:
    """Note ids whose summary job was queued."""
    from memory import tasks

    calls: list[int] = []
    monkeypatch.setattr(tasks.memory_summarise_note, "delay", lambda note_id: calls.append(note_id))
    return calls


def test_append_adds_timestamped_entries_under_updates(owner, queued) -> None:
    note = notes_append(owner=owner, agent_id="coder", text="Prefer small functions.")
    note = notes_append(owner=owner, agent_id="coder", text="  Tests live beside the code.  ")
    assert note.content.count(UPDATES_HEADING) == 1
    assert note.content.startswith(UPDATES_HEADING)
    first, second = note.content.index("Prefer small"), note.content.index("Tests live beside")
    assert first < second
    assert note.content.count(f"### {timezone.now():%Y-%m-%d}") == 2
    assert AgentNote.objects.filter(owner=owner).count() == 1
    assert queued == []


def test_append_keeps_existing_content_above_updates(owner, queued) -> None:
    AgentNote.objects.create(owner=owner, agent_id="coder", content="# Conventions\n\nUse ruff.")
    note = notes_append(owner=owner, agent_id="coder", text="New insight")
    assert note.content.startswith("# Conventions\n\nUse ruff.\n\n## Updates\n\n### ")
    assert note.content.rstrip().endswith("New insight")


def test_empty_text_is_refused(owner) -> None:
    with pytest.raises(ValidationError):
        notes_append(owner=owner, agent_id="coder", text="   ")


def test_long_notes_queue_a_summary_on_commit(owner, settings, queued, django_capture_on_commit_callbacks) -> None:
    settings.AGENT_NOTES_MAX_CHARS = 200
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        notes_append(owner=owner, agent_id="coder", text="short")
    assert callbacks == [] and queued == []
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        note = notes_append(owner=owner, agent_id="coder", text="long " * 60)
    assert len(callbacks) == 1
    assert queued == [note.pk]


def _entry(owner, **kwargs) -> DailyLogEntry:
    defaults = {"agent_id": "coder", "session": "run-1", "type": "changes", "duration_ms": 1200}
    return daily_log_record(owner=owner, **{**defaults, **kwargs})


def test_promote_an_entry_marks_it_once(owner, other_user, queued) -> None:
    entry = _entry(owner, outcome="invalid", error="'title' is a required property")
    note = notes_promote(owner=owner, agent_id="coder", entry_id=entry.pk)
    entry.refresh_from_db()
    assert entry.promoted
    assert "changes in run-1" in note.content
    assert "Invalid output: 'title' is a required property" in note.content
    assert "promoted from" in note.content
    with pytest.raises(Conflict):
        notes_promote(owner=owner, agent_id="coder", entry_id=entry.pk)
    with pytest.raises(NotFound):
        notes_promote(owner=other_user, agent_id="coder", entry_id=entry.pk)
    with pytest.raises(NotFound):
        notes_promote(owner=owner, agent_id="planner", entry_id=entry.pk)


def test_promote_text(owner, queued) -> None:
    note = notes_promote(owner=owner, agent_id="reviewer", text="Always check migrations.")
    assert "Always check migrations." in note.content


def test_summarise_replaces_long_notes_and_keeps_the_original(owner, settings, fake_llm, queued) -> None:
    settings.AGENT_NOTES_MAX_CHARS = 100
    note = notes_append(owner=owner, agent_id="coder", text="Use small functions. " * 10)
    original = note.content
    fake_llm.script(TextReply(text="# Coder notes\n\n- Use small functions.\n\n## Updates\n"))
    assert notes_summarise(note_id=note.pk) is True
    note.refresh_from_db()
    assert note.content == "# Coder notes\n\n- Use small functions.\n\n## Updates\n"
    revision = AgentNoteRevision.objects.get(note=note)
    assert revision.content == original
    assert revision.reason == SUMMARY_REASON.format(limit=100)
    request = fake_llm.requests[-1]
    assert request.forced_tool is None and "tools" not in request.body
    assert "Use small functions." in request.prompt_text
    # Now short: a second run is a no-op and calls nobody.
    assert notes_summarise(note_id=note.pk) is False
    assert len(fake_llm.requests) == 1


def test_a_provider_error_leaves_the_notes_unchanged(owner, settings, fake_llm, queued, caplog) -> None:
    settings.AGENT_NOTES_MAX_CHARS = 100
    note = notes_append(owner=owner, agent_id="coder", text="x" * 200)
    before = note.content
    fake_llm.script(HttpError(401, "authentication_error"))
    assert notes_summarise(note_id=note.pk) is False
    note.refresh_from_db()
    assert note.content == before
    assert not AgentNoteRevision.objects.exists()
    assert "summary failed" in caplog.text


def test_summarise_long_only_touches_long_notes(owner, other_user, settings, fake_llm, queued) -> None:
    settings.AGENT_NOTES_MAX_CHARS = 100
    notes_append(owner=owner, agent_id="coder", text="x" * 200)
    notes_append(owner=other_user, agent_id="coder", text="short")
    fake_llm.script(TextReply(text="summary"))
    assert notes_summarise_long() == 1
    assert AgentNoteRevision.objects.count() == 1


def test_daily_cleanup_counts(owner) -> None:
    today = date(2026, 3, 31)
    for age in (0, 29, 30, 31, 90):
        _entry(owner, day=today - timedelta(days=age))
    assert daily_cleanup_old(retention_days=30, today=today) == 2
    assert sorted((today - e.date).days for e in DailyLogEntry.objects.all()) == [0, 29, 30]
    assert daily_cleanup_old(retention_days=30, today=today) == 0


def test_outcomes_map_to_statuses(owner) -> None:
    assert _entry(owner, outcome="ok").status == "ok"
    assert _entry(owner, outcome="invalid", error="bad").status == "error"
    assert _entry(owner, outcome="error").status == "error"
    assert _entry(owner, outcome="cancelled").status == "cancelled"


def test_markdown_exports(owner, queued) -> None:
    assert "_No notes yet._" in notes_markdown(agent_id="coder", note=None)
    note = notes_append(owner=owner, agent_id="coder", text="Insight")
    assert notes_markdown(agent_id="coder", note=note).startswith("# Notes of coder\n\n## Updates")
    day = timezone.localdate()
    entries = [
        _entry(owner, session="run-1", output_context_id="ctx_1", input_context_ids=["ctx_0"]),
        _entry(owner, session="run-2", outcome="error", error="Overloaded"),
    ]
    text = daily_log_markdown(agent_id="coder", day=day, entries=entries)
    assert text.startswith(f"# Daily log of coder, {day.isoformat()}")
    assert "## run-1" in text and "## run-2" in text
    assert "out: `ctx_1`" in text and "in: `ctx_0`" in text
    assert "— Overloaded" in text
