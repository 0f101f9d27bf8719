"""What an agent is reminded of before it is called: the memories relevant to the task
and its own long-term notes.

Computed once per phase (``recall_for_phase``) and put into the phase's system prompt
(the cached prefix, so it stays the same for all the phase's turns); every call of the
phase records what it was given (``AgentCall.recalled``, the lineage's input item), and
the run panel and the API show it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from memory.selectors.notes import notes_for_prompt
from memory.selectors.semantic import memory_recall
from memory.services.semantic import memory_uses_record
from pipelines.agents import prompts as agents
from pipelines.models import PipelineRun

logger = logging.getLogger(__name__)

# One memory is one line of the prompt: a long one is cut here.
MEMORY_LINE_MAX_CHARS = 1000
MEMORIES_HEADING = "# What the team taught you"
MEMORIES_INTRO = (
    "Lessons from earlier work that fit this task, most relevant first. Follow them unless the task says otherwise."
)
NOTES_HEADING = "# Your notes"


@dataclass(frozen=True)
class Recall:
    """The block for the system prompt, and what went into it."""

    block: str = ""
    # [{"id", "content", "score"}], best first
    memories: list[dict[str, Any]] = field(default_factory=list)
    # {"agent_id", "chars", "cut", "given": ["global", "project"], "project_id"}, or None
    # when the agent has no notes (or none are given)
    notes: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        """What a call was given, as AgentCall.recalled and the lineage keep it."""
        return {"memories": self.memories, "notes": self.notes}


def recall_query(run: PipelineRun, agent: str) -> str:
    """What the memories are matched against: the task, and for the agents that work
    from the plan (the Coder, the Reviewer) its subtasks — the one the Coder is on
    first, when it has said."""
    task = run.task
    parts = [task.title, task.description]
    if agent != agents.PLANNER and isinstance(run.plan, list):
        subtasks = [subtask for subtask in run.plan if isinstance(subtask, dict)]
        current = [s for s in subtasks if run.current_subtask is not None and s.get("order") == run.current_subtask]
        for subtask in [*current, *(s for s in subtasks if s not in current)]:
            parts.append(f"{subtask.get('title') or ''}: {subtask.get('description') or ''}")
    return "\n".join(part.strip() for part in parts if part and part.strip())


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MEMORY_LINE_MAX_CHARS else line[: MEMORY_LINE_MAX_CHARS - 1] + "…"


def recall_for_phase(run: PipelineRun, agent: str) -> Recall:
    """The memories and notes ``agent`` is given for this phase of ``run``."""
    project = run.task.project
    owner = project.owner
    try:
        found = memory_recall(
            user=owner, project=project, agent=agent, query=recall_query(run, agent), not_from_run=run.pk
        )
    except Exception:
        # Memory helps a run; it must not stop one (the embedder or the index failing).
        logger.exception("Run %s: could not recall memories for the %s", run.pk, agent)
        found = []
    memories: list[dict[str, Any]] = [
        {"id": result.memory.pk, "content": result.memory.content, "score": round(result.score, 4)} for result in found
    ]
    if found:
        # The Memory page tells which runs each memory was given to.
        memory_uses_record(owner=owner, memory_ids=[memory["id"] for memory in memories], run_id=run.pk, agent=agent)
    sections = []
    if found:
        lines = "\n".join(f"- {_one_line(result.memory.content)}" for result in found)
        sections.append(f"{MEMORIES_HEADING}\n{MEMORIES_INTRO}\n{lines}")
    notes = None
    # The global notes and this project's only: a lesson of another project never reaches
    # this one through the notes. Resolved now, so a memory deleted since is not given.
    given = notes_for_prompt(
        owner=owner, agent_id=agent, project=project, max_chars=settings.AGENT_NOTES_PROMPT_MAX_CHARS
    )
    if given is not None:
        notes = {
            "agent_id": agent,
            "chars": given.chars,
            "cut": given.cut,
            "given": list(given.given),
            "project_id": project.pk,
        }
        sections.append(f"{NOTES_HEADING}\n{given.text}")
    return Recall(block="\n\n".join(sections), memories=memories, notes=notes)
