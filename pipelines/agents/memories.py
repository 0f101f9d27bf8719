"""What the agents of a run write down for later tasks: their ``[MEMORY: …]`` markers
and the Coder's ``remember`` tool.

The same rules as the chat's ``[REMEMBER: …]`` (memory.services.facts.markers_apply):
every marker is taken out of what is stored and shown (the Coder's summary, hence its
commit message and lineage; the Planner's subtasks; the Reviewer's findings), and each
lesson is stored and confirmed — here in the agent's live log. A lesson is a semantic
memory of the run's project, scoped to the agent that wrote it (recall gives it back to
that agent), with the run as its source. Storing never stops a run: a failure is logged
and the phase goes on.

Like the chat, only the stored text is cleaned: the live log has already streamed the
markers token by token, and the confirmation line follows them there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from memory.markers import parse_agent_memories
from memory.models.semantic import MEMORY_MAX_LENGTH, MemorySource
from memory.services.semantic import MemoryWrite, memory_create, memory_text_shortened, normalise_content
from pipelines.agent_log import AgentLogStream
from pipelines.learning.lessons import LESSON_MEMORY_TYPE, Learned, LessonKind, lessons_record
from pipelines.models import PipelineRun

logger = logging.getLogger(__name__)

REMEMBERED_FOR = "\n[Remembered for the {agent}: {content}]\n"
NOT_REMEMBERED = "\n[Could not store the {agent}'s memory (the run goes on): {content}]\n"


def agent_memory_source_note(*, run: PipelineRun, agent: str) -> str:
    task = run.task
    return f"Written by the {agent} in run {run.number} of task #{task.pk} “{task.title}”"


def agent_memories_store(
    *, run: PipelineRun, agent: str, lessons: Iterable[str], log: AgentLogStream
) -> list[MemoryWrite]:
    """Store each lesson as a memory of the run's project scoped to ``agent``, confirm it
    in ``log``, and return what was written (a near-duplicate is consolidated into the
    memory it resembles). Every agent memory of a run is written here.

    A lesson that cannot be stored is logged and left out; it never raises."""
    project = run.task.project
    note = agent_memory_source_note(run=run, agent=agent)
    writes: list[MemoryWrite] = []
    for lesson in lessons:
        # Shortened rather than refused, as the chat's markers are: a lesson is never
        # lost for its length.
        content = memory_text_shortened(lesson, MEMORY_MAX_LENGTH)
        try:
            write = memory_create(
                owner=project.owner,
                project=project,
                agent=agent,
                content=content,
                memory_type=LESSON_MEMORY_TYPE,
                source=MemorySource.AGENT,
                source_run_id=run.pk,
                source_note=note,
            )
        except Exception:
            logger.exception("Run %s: could not store a memory of the %s", run.pk, agent)
            log.write(NOT_REMEMBERED.format(agent=agent, content=content))
            continue
        writes.append(write)
        log.write(REMEMBERED_FOR.format(agent=agent, content=write.memory.content))
        # The run page lists it among what the run taught.
        memory = write.memory
        learned = Learned(key=f"{LessonKind.AGENT}:{agent}:{memory.pk}", kind=LessonKind.AGENT)
        learned.memories.append(
            {
                "id": memory.pk,
                "agent": agent,
                "content": memory.content,
                "how": "new" if write.created else "reinforced",
            }
        )
        try:
            lessons_record(run, learned)
        except Exception:
            logger.exception("Run %s: could not record the %s's memory on the run", run.pk, agent)
    log.flush()
    return writes


class PhaseMemories:
    """The lessons one agent gives over one phase: each stored once, however many times
    the agent repeats it (in its text, its answer, the ``remember`` tool).

    ``reused``: the reply was bought by a worker that died and is replayed
    (pipelines.runs.recovery); its lessons were stored when it was bought, so they are
    stripped but not stored again — a replay must not reinforce a memory twice."""

    def __init__(self, run: PipelineRun, agent: str, log: AgentLogStream) -> None:
        self.run = run
        self.agent = agent
        self.log = log
        self.written: list[MemoryWrite] = []
        self._kept: set[str] = set()

    def keep(self, lesson: str, *, reused: bool = False) -> bool:
        """Store ``lesson`` unless this phase already did; False only when storing failed."""
        key = normalise_content(lesson)
        if key in self._kept or reused:
            self._kept.add(key)
            return True
        writes = agent_memories_store(run=self.run, agent=self.agent, lessons=[lesson], log=self.log)
        if not writes:
            return False
        self._kept.add(key)
        self.written.extend(writes)
        return True

    def take_text(self, text: str, *, reused: bool = False) -> str:
        """``text`` without its markers; their lessons kept."""
        shown, lessons = parse_agent_memories(text)
        for lesson in lessons:
            self.keep(lesson, reused=reused)
        return shown

    def take_answer(self, value: Any, *, reused: bool = False) -> Any:
        """A tool's input with the markers taken out of every string in it (a finding's
        message, a subtask's description); their lessons kept."""
        if isinstance(value, str):
            return self.take_text(value, reused=reused)
        if isinstance(value, dict):
            return {name: self.take_answer(item, reused=reused) for name, item in value.items()}
        if isinstance(value, list):
            return [self.take_answer(item, reused=reused) for item in value]
        return value
