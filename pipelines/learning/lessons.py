"""What a run teaches the team, stored as memories the next runs recall (pipelines/agents/recall.py).

Three moments, each learned once (its key is kept in ``PipelineRun.lessons``):

- a person's request for changes becomes a project memory for the Coder, reinforceable:
  asked for again (or reused by an approved run) it stays, otherwise it fades;
- the review findings a fix round had to fix become lessons for the Coder and the
  Reviewer, contextual with the project's half-life: a finding matters while the code
  it was about is fresh;
- an approved run reinforces the memories it was given and adds a line to the Coder's
  notes naming what the run taught.

What is stored is either the texts as written or, when the project distils, what one
short call of its model made of them (pipelines/agents/distiller.py makes that call: it is the
part that needs an agent conversation). Learning helps a run and must never stop one:
a memory that cannot be written is logged and the run goes on.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from memory.models.semantic import DecayPolicy, MemorySource
from memory.selectors.semantic import memory_ids_used_by_run
from memory.services.notes import notes_append
from memory.services.semantic import memory_create, memory_reinforce_many, memory_text_shortened
from pipelines.models import CODER, REVIEWER, PipelineRun

logger = logging.getLogger(__name__)

LESSON_MEMORY_TYPE = "lesson"
# A lesson is one idea: longer texts (a finding quoting test output) are cut here.
LESSON_MAX_CHARS = 600
# Findings below this severity were remarks, not mistakes the Coder had to fix.
LESSON_SEVERITIES = ("minor", "major", "critical")
# The Coder's out-of-turns note and failing test output are about one attempt, not
# lessons: only what the Reviewer itself found is learned.
REVIEWER_SOURCE = "reviewer"


class LessonKind:
    FEEDBACK = "feedback"
    FINDINGS = "findings"
    APPROVAL = "approval"
    AGENT = "agent"  # an agent's own [MEMORY: …] (pipelines/agents/memories.py)


@dataclass(frozen=True)
class Moment:
    """Something a run can learn from: its texts as written, and for whom they are."""

    key: str
    kind: str
    texts: list[str]
    agents: tuple[str, ...]
    source: str
    decay_policy: str
    half_life_hours: float | None = None
    # How the source note names where the texts came from, e.g. "the request for changes".
    origin: str = ""


@dataclass
class Learned:
    """One entry of ``PipelineRun.lessons``."""

    key: str
    kind: str
    distilled: bool = False
    memories: list[dict[str, Any]] = field(default_factory=list)
    # Approval: the ids of the memories the run was given that it reinforced.
    reinforced: list[int] = field(default_factory=list)
    note: str = ""

    def as_entry(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kind": self.kind,
            "at": timezone.now().isoformat(),
            "distilled": self.distilled,
            "memories": self.memories,
            "reinforced": self.reinforced,
            "note": self.note,
        }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def already_learned(run: PipelineRun, key: str) -> bool:
    return any(isinstance(entry, dict) and entry.get("key") == key for entry in run.lessons or [])


def feedback_moment(run: PipelineRun, line_comment_texts: list[str] | None = None) -> Moment | None:
    """The person's request for changes the run is working on, with what its comments on
    lines said (pipelines.review.selectors.line_comment_lesson_texts), unless already learned."""
    feedback = (run.feedback or "").strip()
    if not feedback:
        return None
    texts = [feedback, *(text for text in line_comment_texts or [] if text.strip())]
    key = f"feedback:{_digest(chr(10).join(texts))}"
    if already_learned(run, key):
        return None
    return Moment(
        key=key,
        kind=LessonKind.FEEDBACK,
        texts=texts,
        agents=(CODER,),
        source=MemorySource.FEEDBACK,
        decay_policy=DecayPolicy.REINFORCEABLE,
        origin="the request for changes",
    )


def fixed_findings(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Reviewer's findings that fix rounds fixed: those of the failed reviews of the
    latest round of work (since the last request for changes: ``iteration`` starts at 1
    again), when its last review passed."""
    if not history or not history[-1].get("pass"):
        return []
    start = len(history) - 1
    while start > 0 and int(history[start].get("iteration") or 0) > 1:
        start -= 1
    findings: list[dict[str, Any]] = []
    for entry in history[start:-1]:
        for finding in entry.get("findings") or []:
            if (
                isinstance(finding, dict)
                and finding.get("source") == REVIEWER_SOURCE
                and finding.get("severity") in LESSON_SEVERITIES
                and str(finding.get("message") or "").strip()
            ):
                findings.append(finding)
    return findings


def _finding_text(finding: dict[str, Any]) -> str:
    message = " ".join(str(finding["message"]).split())
    where = str(finding.get("file") or "").strip()
    return f"{message} (found in {where})" if where else message


def findings_moment(run: PipelineRun, history: list[dict[str, Any]], *, half_life_hours: float | None) -> Moment | None:
    """The findings fix rounds fixed before the review in ``history``'s last entry passed."""
    texts: list[str] = []
    for finding in fixed_findings(history):
        text = _finding_text(finding)
        if text not in texts:
            texts.append(text)
    key = f"review:{len(history)}"
    if not texts or already_learned(run, key):
        return None
    return Moment(
        key=key,
        kind=LessonKind.FINDINGS,
        texts=texts,
        agents=(CODER, REVIEWER),
        source=MemorySource.FINDING,
        decay_policy=DecayPolicy.CONTEXTUAL,
        half_life_hours=half_life_hours,
        origin="review findings a fix round fixed",
    )


def _source_note(run: PipelineRun, moment: Moment, *, distilled: bool) -> str:
    task = run.task
    how = "Distilled from" if distilled else "From"
    return f"{how} {moment.origin} in run {run.number} of task #{task.pk} “{task.title}”."


def lessons_store(
    run: PipelineRun, moment: Moment, texts: list[str], *, distilled: bool, applies_when: list[str] | None = None
) -> Learned:
    """Write ``texts`` as the moment's memories (one per text and agent; near-duplicates
    consolidate into the memory they repeat) and record the moment on the run.
    ``applies_when[i]``, when given, says when ``texts[i]`` applies (the distiller wrote it)."""
    project = run.task.project
    learned = Learned(key=moment.key, kind=moment.kind, distilled=distilled)
    source = MemorySource.DISTILLED if distilled else moment.source
    note = _source_note(run, moment, distilled=distilled)
    lines = applies_when or []
    for i, text in enumerate(texts):
        content = memory_text_shortened(" ".join(text.split()), LESSON_MAX_CHARS)
        if not content:
            continue
        for agent in moment.agents:
            try:
                write = memory_create(
                    owner=project.owner,
                    content=content,
                    applies_when=lines[i] if i < len(lines) else "",
                    memory_type=LESSON_MEMORY_TYPE,
                    decay_policy=moment.decay_policy,
                    half_life_hours=moment.half_life_hours,
                    agent=agent,
                    project=project,
                    source=source,
                    source_run_id=run.pk,
                    source_note=note,
                )
            except Exception:
                logger.exception("Run %s: could not store a lesson for the %s", run.pk, agent)
                continue
            learned.memories.append(
                {
                    "id": write.memory.pk,
                    "agent": agent,
                    "content": write.memory.content,
                    "how": "new" if write.created else "reinforced",
                }
            )
    lessons_record(run, learned)
    return learned


def lessons_record(run: PipelineRun, learned: Learned) -> None:
    """Add ``learned`` to the run's lessons (once per key)."""
    with transaction.atomic():
        current = PipelineRun.objects.select_for_update().filter(pk=run.pk).values_list("lessons", flat=True).first()
        entries = [entry for entry in current or [] if isinstance(entry, dict) and entry.get("key") != learned.key]
        entries.append(learned.as_entry())
        PipelineRun.objects.filter(pk=run.pk).update(lessons=entries)
    run.lessons = entries


def _quoted(contents: list[str], limit: int = 3) -> str:
    shown = [f"“{content if len(content) <= 120 else content[:119] + '…'}”" for content in contents[:limit]]
    more = len(contents) - len(shown)
    return "; ".join(shown) + (f" and {more} more" if more > 0 else "")


def lessons_on_approval(run: PipelineRun) -> Learned | None:
    """An approved run: reinforce the memories its agents were given (they helped make a
    change a person accepted) and add a line to the Coder's notes naming what it taught."""
    if already_learned(run, LessonKind.APPROVAL):
        return None
    owner = run.task.project.owner
    try:
        given = memory_ids_used_by_run(owner=owner, run_id=run.pk)
        reinforced = memory_reinforce_many(owner=owner, memory_ids=given) if given else 0
        taught = []
        for entry in run.lessons or []:
            for memory in entry.get("memories") or [] if isinstance(entry, dict) else []:
                if memory.get("agent") == CODER and memory.get("content") not in taught:
                    taught.append(memory.get("content"))
        task = run.task
        line = f"Run {run.number} of task #{task.pk} “{task.title}” was approved. "
        line += f"Learned: {_quoted(taught)}." if taught else "It taught nothing new."
        if reinforced:
            line += f" Reinforced {reinforced} memor{'y' if reinforced == 1 else 'ies'} it was given."
        notes_append(owner=owner, agent_id=CODER, text=line, source=f"run {run.pk}")
    except Exception:
        logger.exception("Run %s: could not learn from its approval", run.pk)
        return None
    learned = Learned(
        key=LessonKind.APPROVAL,
        kind=LessonKind.APPROVAL,
        reinforced=given if reinforced else [],
        note=line,
    )
    lessons_record(run, learned)
    return learned
