"""The notes an agent is given (memory.selectors.notes.notes_for_prompt): its global
notes and its notes in the call's project, references resolved to the memories' text at
the call, capped with the newest part of each note kept; the summariser keeps references."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import AgentNote, Memory
from memory.selectors.notes import GLOBAL_NOTES_HEADING, NOTES_CUT, PROJECT_NOTES_HEADING, notes_for_prompt
from memory.services.notes import SUMMARY_SYSTEM, notes_append, notes_summarise
from memory.services.semantic import memory_create, memory_delete, memory_update_content
from tests.factories import ProjectFactory
from tests.fake_anthropic import TextReply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_summary_jobs(monkeypatch) -> None:
    from memory import tasks

    monkeypatch.setattr(tasks.memory_summarise_note, "delay", lambda note_id: None)


def given(owner, project, max_chars: int = 4000) -> str:
    notes = notes_for_prompt(owner=owner, agent_id="coder", project=project, max_chars=max_chars)
    return notes.text if notes else ""


def lesson(owner, content: str, **scope) -> Memory:
    return memory_create(owner=owner, content=content, agent="coder", **scope)[0]


def test_the_global_notes_and_the_projects_not_another_projects(owner, project) -> None:
    elsewhere = ProjectFactory(owner=owner)
    notes_append(owner=owner, agent_id="coder", text="Keep commits small.")
    notes_append(owner=owner, agent_id="coder", text="Orders use cursors.", project=project)
    notes_append(owner=owner, agent_id="coder", text="Billing rounds half up.", project=elsewhere)

    text = given(owner, project)
    assert text.startswith(f"{GLOBAL_NOTES_HEADING}\n## Updates")
    assert PROJECT_NOTES_HEADING.format(name=project.name) in text
    assert "Keep commits small." in text and "Orders use cursors." in text
    assert "Billing rounds half up." not in text
    notes = notes_for_prompt(owner=owner, agent_id="coder", project=elsewhere, max_chars=4000)
    assert notes is not None and notes.given == ("global", "project")
    assert "Orders use cursors." not in notes.text and "Billing rounds half up." in notes.text
    assert notes_for_prompt(owner=owner, agent_id="reviewer", project=project, max_chars=4000) is None


def test_references_are_read_at_the_call(owner, other_user, project) -> None:
    elsewhere = ProjectFactory(owner=owner)
    kept = lesson(owner, "Name fields in snake_case", project=project)
    everywhere = lesson(owner, "Dates are ISO 8601", is_global=True)
    deleted = lesson(owner, "A lesson taken back", project=project)
    faded = lesson(owner, "A lesson long forgotten", project=project, decay_policy="contextual", half_life_hours=1)
    Memory.objects.filter(pk=faded.pk).update(created_at=timezone.now() - timedelta(days=365))
    other_project = lesson(owner, "Billing rounds half up", project=elsewhere)
    theirs = memory_create(owner=other_user, content="Someone else's lesson", is_global=True)[0]
    memory_delete(owner=owner, memory_id=deleted.pk)
    text = "Run 1 was approved.\n" + "\n".join(
        f"- Learned: [memory:{memory.pk}]" for memory in (kept, everywhere, deleted, faded, other_project, theirs)
    )
    notes_append(owner=owner, agent_id="coder", text=text, project=project)

    prompt = given(owner, project)
    assert "Run 1 was approved.\n- Learned: “Name fields in snake_case”\n- Learned: “Dates are ISO 8601”" in prompt
    for gone in ("taken back", "forgotten", "Billing", "Someone else", "[memory:", "Learned: \n"):
        assert gone not in prompt
    assert prompt.count("- Learned:") == 2

    memory_update_content(owner=owner, memory_id=kept.pk, content="Name every field in snake_case")
    prompt = given(owner, project)
    assert "- Learned: “Name every field in snake_case”" in prompt and "Name fields in" not in prompt


def test_a_long_projects_notes_leave_room_for_the_global_ones_and_keep_their_newest(owner, project) -> None:
    AgentNote.objects.create(owner=owner, agent_id="coder", content="HAND-WRITTEN global note.")
    AgentNote.objects.create(owner=owner, agent_id="coder", project=project, content="OLDEST " + "x" * 5000 + " NEWEST")
    notes = notes_for_prompt(owner=owner, agent_id="coder", project=project, max_chars=1000)
    assert notes is not None and notes.cut and notes.chars == 1000
    assert "HAND-WRITTEN global note." in notes.text
    assert f"{NOTES_CUT}" in notes.text and "NEWEST" in notes.text and "OLDEST" not in notes.text
    assert notes_for_prompt(owner=owner, agent_id="coder", project=project, max_chars=0) is None


def test_the_summary_keeps_references_and_drops_invented_ones(owner, project, settings, fake_llm) -> None:
    settings.AGENT_NOTES_MAX_CHARS = 100
    note = notes_append(owner=owner, agent_id="coder", project=project, text="- Learned: [memory:7]\n" + "y" * 200)
    fake_llm.script(TextReply(text="# Notes\n\n- Learned: [memory:7]\n- Learned: [memory:8]\n\n## Updates\n"))
    assert notes_summarise(note_id=note.pk) is True
    note.refresh_from_db()
    assert note.content == "# Notes\n\n- Learned: [memory:7]\n\n## Updates\n"
    request = fake_llm.requests[-1]
    assert request.system_text == SUMMARY_SYSTEM and "[memory:12]" in SUMMARY_SYSTEM and "verbatim" in SUMMARY_SYSTEM
    assert f"in the project “{project.name}”" in request.prompt_text
