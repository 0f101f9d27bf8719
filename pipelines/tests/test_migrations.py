"""Migration 0018 moves what approvals wrote into the Coder's global notes to the notes
of each run's project, as references to the memories the runs taught, leaves what a
person wrote where it was, and goes back without losing a word."""

from __future__ import annotations

import numpy as np
import pytest
from django.utils import timezone

from memory.embeddings import DIMENSIONS, EMBEDDING_MODEL
from tests.migrations import migrate, migrate_to_latest

BEFORE = [("memory", "0004_memory_embedding_vector"), ("pipelines", "0017_run_message_delivered_agent")]
AFTER = [("pipelines", "0018_notes_to_projects")]


def section(heading: str, text: str) -> tuple[str, str]:
    return heading, text


def notes(head: str, *sections: tuple[str, str]) -> str:
    """Notes as memory.services.notes.notes_append writes them."""
    content = head
    for heading, text in sections:
        content = f"{content.rstrip()}\n\n### {heading}\n\n{text}\n"
    return content


@pytest.mark.django_db(transaction=True)
def test_approval_sections_move_to_their_runs_project_and_back() -> None:
    try:
        apps = migrate(BEFORE)
        User = apps.get_model("accounts", "User")
        Project = apps.get_model("projects", "Project")
        Task = apps.get_model("tasks", "Task")
        PipelineRun = apps.get_model("pipelines", "PipelineRun")
        Memory = apps.get_model("memory", "Memory")
        AgentNote = apps.get_model("memory", "AgentNote")
        AgentNoteRevision = apps.get_model("memory", "AgentNoteRevision")

        alice = User.objects.create(email="alice@example.com")
        bob = User.objects.create(email="bob@example.com")
        orders_project = Project.objects.create(owner=alice, name="Orders")
        billing_project = Project.objects.create(owner=alice, name="Billing")
        bobs_project = Project.objects.create(owner=bob, name="Theirs")
        now = timezone.now()
        lesson = Memory.objects.create(
            owner=alice,
            content="Use snake_case for API fields",
            project=orders_project,
            agent="coder",
            created_at=now,
            last_reinforced_at=now,
            content_hash="h" * 64,
            embedding=np.zeros(DIMENSIONS, dtype="<f4"),
            embedding_model=EMBEDDING_MODEL,
        )

        def approved_run(project, title: str, lessons: list) -> object:
            task = Task.objects.create(project=project, title=title)
            return PipelineRun.objects.create(task=task, number=1, lessons=lessons)

        taught = approved_run(
            orders_project,
            "Orders",
            [
                {
                    "key": "feedback:1",
                    "kind": "feedback",
                    "memories": [
                        {"id": lesson.pk, "agent": "coder", "content": lesson.content},
                        {"id": lesson.pk + 100, "agent": "reviewer", "content": "not the Coder's"},
                    ],
                },
                {"key": "approval", "kind": "approval", "memories": []},
            ],
        )
        reinforced_only = approved_run(billing_project, "Billing", [{"key": "approval", "memories": []}])
        quoted_but_unrecorded = approved_run(billing_project, "Invoices", [])
        bobs = approved_run(bobs_project, "Theirs", [])

        taught_line = f"Run 1 of task #{taught.task_id} “Orders” was approved. Learned: “{lesson.content}”."
        taught_line += " Reinforced 2 memories it was given."
        nothing_new = (
            f"Run 1 of task #{reinforced_only.task_id} “Billing” was approved. It taught nothing new."
            " Reinforced 1 memory it was given."
        )
        kept_sections = [
            section("2026-01-02 10:00 UTC · promoted", "Always check migrations."),
            section(
                f"2026-01-04 10:00 UTC · run {quoted_but_unrecorded.pk}",
                f"Run 1 of task #{quoted_but_unrecorded.task_id} “Invoices” was approved. Learned: “lost”.",
            ),
            section(
                f"2026-01-05 10:00 UTC · run {bobs.pk}",
                f"Run 1 of task #{bobs.task_id} “Theirs” was approved. It taught nothing new.",
            ),
            section("2026-01-06 10:00 UTC · run 99999", "Run 7 of task #99 “Gone” was approved."),
            section(
                f"2026-01-07 10:00 UTC · run {taught.pk}",
                f"Run 1 of task #{taught.task_id} “Orders” was approved. It taught nothing new.\nEdited by hand.",
            ),
        ]
        head = "# Conventions\n\nUse ruff, written by a person.\n\n## Updates"
        original = notes(
            head,
            section(f"2026-01-01 10:00 UTC · run {taught.pk}", taught_line),
            kept_sections[0],
            section(f"2026-01-03 10:00 UTC · run {reinforced_only.pk}", nothing_new),
            *kept_sections[1:],
        )
        alices_notes = AgentNote.objects.create(owner=alice, agent_id="coder", content=original)
        AgentNoteRevision.objects.create(note=alices_notes, content="Before a summary", reason="Summarised")
        bobs_notes = AgentNote.objects.create(owner=bob, agent_id="coder", content="Bob's own notes.")

        apps = migrate(AFTER)
        AgentNote = apps.get_model("memory", "AgentNote")
        global_notes = AgentNote.objects.get(owner_id=alice.pk, agent_id="coder", project__isnull=True)
        # What a person wrote, and every section that cannot be placed, stay as written.
        assert global_notes.content == notes(head, *kept_sections)
        orders_notes = AgentNote.objects.get(owner_id=alice.pk, project_id=orders_project.pk)
        assert orders_notes.content == (
            f"## Updates\n\n### 2026-01-01 10:00 UTC · run {taught.pk}\n\n"
            f"Run 1 of task #{taught.task_id} “Orders” was approved. Reinforced 2 memories it was given.\n"
            f"- Learned: [memory:{lesson.pk}]\n"
        )
        billing_notes = AgentNote.objects.get(owner_id=alice.pk, project_id=billing_project.pk)
        assert billing_notes.content == notes(
            "## Updates", section(f"2026-01-03 10:00 UTC · run {reinforced_only.pk}", nothing_new)
        )
        assert not AgentNote.objects.filter(project_id=bobs_project.pk).exists()
        assert AgentNote.objects.get(pk=bobs_notes.pk).content == "Bob's own notes."

        # A person writes to a project's notes after the migration: back, it is kept too.
        orders_notes.content = notes(orders_notes.content, section("2026-01-08 10:00 UTC", "Cursor pagination."))
        orders_notes.save()

        apps = migrate(BEFORE)
        AgentNote = apps.get_model("memory", "AgentNote")
        (back,) = AgentNote.objects.filter(owner_id=alice.pk)
        assert back.content == notes(original, section("2026-01-08 10:00 UTC", "Cursor pagination."))
        assert apps.get_model("memory", "AgentNoteRevision").objects.get().note_id == back.pk
    finally:
        migrate_to_latest()
