"""What a run teaches the team, stored as memories the next runs recall (pipelines/agents/recall.py).

Three moments, each learned once (its key is kept in ``PipelineRun.lessons``):

- a person's request for changes becomes a project memory for the Coder, reinforceable:
  asked for again (or reused by an approved run) it stays, otherwise it fades;
- the review findings a fix round had to fix become lessons for the Coder and the
  Reviewer, contextual with the project's half-life: a finding matters while the code
  it was about is fresh;
- an approved run reinforces the memories it was given and adds a section to the
  Coder's notes in the run's project naming what the run taught: references to the
  memories (memory.references), not copies, so a lesson deleted or edited later is
  deleted or edited in the notes too.

What was said about some lines or a file (a comment on lines, a finding in a file) is a
lesson about them: it keeps them as citations (memory.citations) and is recalled only for
a task touching those files (``path_scoped``), unless the distillation says it applies to
the whole project. A finding's lesson that cites its file is reinforceable instead of
contextual: recall checks its code still holds, and a run that was given it and was
approved renews it. On approval, the citations move to the code that landed.

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

from memory.citations import Citation, citation_of_file, citation_of_quote
from memory.models.semantic import DecayPolicy, MemorySource
from memory.references import memory_reference
from memory.selectors.semantic import memory_ids_used_by_run
from memory.services.citations import memory_citations_land
from memory.services.notes import notes_append
from memory.services.semantic import memory_create, memory_reinforce_many, memory_text_shortened
from pipelines.models import CODER, FEEDBACK_LEARNED_FROM, REVIEWER, PipelineRun
from pipelines.runs.workspace import run_repository

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
    # Per text (same order), where in the code it was said; () for a general one.
    cited: tuple[tuple[Citation, ...], ...] = ()

    def citations_of(self, index: int) -> tuple[Citation, ...]:
        return self.cited[index] if index < len(self.cited) else ()


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


def line_comment_citation(comment: dict[str, Any], *, commit: str) -> tuple[Citation, ...]:
    """Where a comment on lines (pipelines.review.selectors.line_comments_for_coder) was:
    its lines and their quoted text, on the branch's head when it was written. A comment
    on removed lines cites its file: the lines it quotes are gone from the branch, and a
    citation is checked against the code as it is (memory.citations)."""
    path = str(comment.get("path") or "")
    if not path:
        return ()
    start = int(comment.get("line_start") or 0)
    quote = str(comment.get("quote") or "")
    if start and quote and comment.get("side", "new") != "old":
        return (citation_of_quote(path=path, start=start, end=start, quote=quote, commit=commit),)
    return (citation_of_file(path=path, commit=commit),)


def feedback_moment(
    run: PipelineRun, line_comment_texts: list[str] | None = None, line_comments: list[dict[str, Any]] | None = None
) -> Moment | None:
    """The person's request for changes the run is working on, with what its comments on
    lines said (pipelines.review.selectors.line_comment_lesson_texts, same order as
    ``line_comments``, which give their citations), unless already learned. A request
    of comments alone (no general feedback) teaches its comments; None when there is
    nothing to learn — or when the request was not a person's (the forge's checks, a
    moved base: FEEDBACK_LEARNED_FROM)."""
    if run.feedback_origin not in FEEDBACK_LEARNED_FROM:
        return None
    feedback = (run.feedback or "").strip()
    # The general feedback (cited nowhere: it is about the whole change) comes first.
    texts: list[str] = [feedback] if feedback else []
    cited: list[tuple[Citation, ...]] = [()] if feedback else []
    comments = line_comments or []
    for index, text in enumerate(line_comment_texts or []):
        if text.strip():
            texts.append(text)
            comment = comments[index] if index < len(comments) else {}
            cited.append(line_comment_citation(comment, commit=run.head_commit or run.base_commit))
    if not texts:
        return None
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
        cited=tuple(cited),
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
    """The findings fix rounds fixed before the review in ``history``'s last entry passed,
    each citing its file (not its line: that was the line in a version the fix rounds
    rewrote) as the passing head has it."""
    texts: list[str] = []
    cited: list[tuple[Citation, ...]] = []
    for finding in fixed_findings(history):
        text = _finding_text(finding)
        if text not in texts:
            texts.append(text)
            where = str(finding.get("file") or "").strip().removeprefix("./")
            cited.append((citation_of_file(path=where, commit=run.head_commit),) if where and run.head_commit else ())
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
        cited=tuple(cited),
    )


def _source_note(run: PipelineRun, moment: Moment, *, distilled: bool) -> str:
    task = run.task
    how = "Distilled from" if distilled else "From"
    return f"{how} {moment.origin} in run {run.number} of task #{task.pk} “{task.title}”."


def distilled_citations(moment: Moment, files: list[tuple[str, ...]]) -> list[tuple[Citation, ...]]:
    """Where each distilled lesson applies: the files the distillation names for it
    (``files``, one entry per lesson), cited as what was said about them cited them —
    the lines of the one comment on that file, or the whole file when several were said
    about it (which of them a merged lesson came from is not known, and citing all their
    lines would make it stale when any one of them goes). None — the whole project — for
    a lesson it names no file for (the distiller is asked to: a rule it wrote without
    files is one it generalised)."""
    said: dict[str, list[Citation]] = {}
    for index in range(len(moment.texts)):
        for citation in moment.citations_of(index):
            said.setdefault(citation.path, []).append(citation)
    cited = []
    for paths in files:
        wanted = [path.strip().removeprefix("./") for path in paths]
        lesson: list[Citation] = []
        for path in dict.fromkeys(wanted):
            found = said.get(path, [])
            if len(found) == 1:
                lesson.append(found[0])
            elif found:
                lesson.append(citation_of_file(path=path, commit=found[0].commit))
        cited.append(tuple(lesson))
    return cited


def lessons_store(
    run: PipelineRun,
    moment: Moment,
    texts: list[str],
    *,
    distilled: bool,
    applies_when: list[str] | None = None,
    cited: list[tuple[Citation, ...]] | None = None,
) -> Learned:
    """Write ``texts`` as the moment's memories (one per text and agent; near-duplicates
    consolidate into the memory they repeat) and record the moment on the run.
    ``applies_when[i]``, when given, says when ``texts[i]`` applies (the distiller wrote
    it); ``cited`` (same order as ``texts``; the moment's own when they are its texts)
    makes a lesson about those files only."""
    project = run.task.project
    learned = Learned(key=moment.key, kind=moment.kind, distilled=distilled)
    source = MemorySource.DISTILLED if distilled else moment.source
    note = _source_note(run, moment, distilled=distilled)
    if cited is None:
        cited = [moment.citations_of(index) for index in range(len(texts))]
    lines = applies_when or []
    for index, text in enumerate(texts):
        content = memory_text_shortened(" ".join(text.split()), LESSON_MAX_CHARS)
        if not content:
            continue
        citations = cited[index] if index < len(cited) else ()
        # A cited finding is checked against the code at every recall: it need not fade
        # with time, only when unused (see the module).
        policy = DecayPolicy.REINFORCEABLE if citations else moment.decay_policy
        for agent in moment.agents:
            try:
                write = memory_create(
                    owner=project.owner,
                    content=content,
                    applies_when=lines[index] if index < len(lines) else "",
                    memory_type=LESSON_MEMORY_TYPE,
                    decay_policy=policy,
                    half_life_hours=moment.half_life_hours,
                    agent=agent,
                    project=project,
                    source=source,
                    source_run_id=run.pk,
                    source_note=note,
                    citations=citations,
                    path_scoped=bool(citations),
                )
            except Exception:
                logger.exception("Run %s: could not store a lesson for the %s", run.pk, agent)
                continue
            stored: dict[str, Any] = {
                "id": write.memory.pk,
                "agent": agent,
                "content": write.memory.content,
                "how": "new" if write.created else "reinforced",
            }
            if citations:
                stored["about"] = [citation.label for citation in citations]
            learned.memories.append(stored)
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


def _citations_land(run: PipelineRun) -> None:
    """The lessons this run learned from comments and findings now cite the code as it
    was approved (memory.services.semantic.memory_citations_land)."""
    ids = [
        memory["id"]
        for entry in run.lessons or []
        if isinstance(entry, dict) and entry.get("kind") in (LessonKind.FEEDBACK, LessonKind.FINDINGS)
        for memory in entry.get("memories") or []
        if isinstance(memory, dict) and isinstance(memory.get("id"), int)
    ]
    repository = run_repository(run) if ids and run.head_commit else None
    if repository is None:
        return
    from repos.services.reading import files_at_commit

    try:
        memory_citations_land(
            owner=run.task.project.owner,
            memory_ids=ids,
            commit=run.head_commit,
            read_files=lambda paths: files_at_commit(repository=repository, commit=run.head_commit, paths=paths),
        )
    except Exception:
        logger.exception("Run %s: could not move its lessons' citations to the approved code", run.pk)


def coder_lesson_ids(lessons: list[Any] | None) -> list[int]:
    """The ids of the Coder's memories a run's lessons (``PipelineRun.lessons``) wrote or
    reinforced, once each, in the order learned."""
    taught: list[int] = []
    for entry in lessons or []:
        for memory in entry.get("memories") or [] if isinstance(entry, dict) else []:
            memory_id = memory.get("id") if isinstance(memory, dict) and memory.get("agent") == CODER else None
            if isinstance(memory_id, int) and memory_id not in taught:
                taught.append(memory_id)
    return taught


def approval_note(run: PipelineRun, *, taught: list[int], reinforced: int) -> tuple[str, str]:
    """The section an approval adds to the Coder's notes, one bullet per lesson, and the
    line the run's record keeps (the panel shows it: no references to resolve there)."""
    task = run.task
    line = f"Run {run.number} of task #{task.pk} “{task.title}” was approved."
    if not taught:
        line += " It taught nothing new."
    if reinforced:
        line += f" Reinforced {reinforced} memor{'y' if reinforced == 1 else 'ies'} it was given."
    bullets = [f"- Learned: {memory_reference(memory_id)}" for memory_id in taught]
    record = line + (f" It taught {len(taught)} lesson{'' if len(taught) == 1 else 's'}." if taught else "")
    return "\n".join([line, *bullets]), record


def lessons_on_approval(run: PipelineRun) -> Learned | None:
    """An approved run: reinforce the memories its agents were given (they helped make a
    change a person accepted) and add to the Coder's notes in the run's project what it
    taught, as references to the lessons' memories."""
    if already_learned(run, LessonKind.APPROVAL):
        return None
    project = run.task.project
    owner = project.owner
    _citations_land(run)
    try:
        given = memory_ids_used_by_run(owner=owner, run_id=run.pk)
        reinforced = memory_reinforce_many(owner=owner, memory_ids=given) if given else 0
        text, line = approval_note(run, taught=coder_lesson_ids(run.lessons), reinforced=reinforced)
        # The project's notes: what one project's runs taught is not told to another's.
        notes_append(owner=owner, agent_id=CODER, text=text, source=f"run {run.pk}", project=project)
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
