"""What an agent is reminded of before it is called: the memories relevant to the task
and its own long-term notes.

Computed once per phase (``recall_for_phase``) and put into the phase's system prompt
(the cached prefix, so it stays the same for all the phase's turns); every call of the
phase records what it was given (``AgentCall.recalled``, the lineage's input item), and
the run panel and the API show it.

A memory learned on some files is given only when the task touches one of them
(``recall_paths``: the files its text and plan name, the files its comments are on, the
files its branch changed); a memory that cites code is checked against the run's base
commit first (memory.services.semantic.memory_citations_verify): used when its code
holds, re-anchored when it moved, marked stale and left out when it is gone.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from memory.citations import CitationStatus
from memory.selectors.notes import notes_for_prompt
from memory.selectors.semantic import MemorySearchResult, memory_recall
from memory.services.citations import memory_citations_verify
from memory.services.semantic import memory_uses_record
from pipelines.agents import prompts as agents
from pipelines.models import PipelineRun, RunLineComment
from pipelines.runs.workspace import run_repository

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
    # [{"id", "content", "score", "path_match", "check"}], best first; ``check``: what
    # checking its citations found (a memory.citations.CitationStatus)
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


# A path as a task's text names one: words with a slash or a file extension
# ("src/app.py", "docs/", "Makefile" is not caught, and need not be: a lesson about it
# is recalled once the branch touches it).
_PATH_MENTION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]*|[\w-]+(?:\.[\w-]+)*\.[A-Za-z][\w]{0,9})(?![\w/])")
# Recall asks memory for more than it gives, so that a memory left out as stale leaves
# room for the next one.
STALE_ROOM = 3


def recall_paths(run: PipelineRun) -> set[str]:
    """The files a run's task touches, as far as is known before the agent's call: the
    paths its title, description and plan name, the files of its comments on lines, and
    the files its branch has changed so far."""
    task = run.task
    texts = [task.title, task.description]
    for subtask in run.plan if isinstance(run.plan, list) else []:
        if isinstance(subtask, dict):
            texts += [str(subtask.get("title") or ""), str(subtask.get("description") or "")]
    paths = {match.rstrip(".") for text in texts if text for match in _PATH_MENTION.findall(text)}
    paths |= set(RunLineComment.objects.filter(run=run).values_list("path", flat=True))
    repository = run_repository(run) if run.base_commit and run.head_commit else None
    if repository is not None and run.head_commit != run.base_commit:
        from repos.services.reading import branch_changed_paths

        try:
            paths |= set(branch_changed_paths(repository=repository, base=run.base_commit, head=run.head_commit))
        except Exception:
            logger.exception("Run %s: could not list the files its branch changed", run.pk)
    return {path.strip().removeprefix("./") for path in paths if path.strip().removeprefix("./")}


def _checked(run: PipelineRun, found: list[MemorySearchResult]) -> dict[int, str]:
    """Check the citations of ``found`` against the run's base commit (see the module)."""
    cited = [result.memory for result in found if result.memory.citations]
    repository = run_repository(run) if cited else None
    if repository is None or not run.base_commit:
        return {result.memory.pk: CitationStatus.UNVERIFIED if result.memory.citations else "" for result in found}
    from repos.services.reading import commit_contains, files_at_commit

    base = run.base_commit
    contained: dict[str, bool] = {}

    def contains(commit: str) -> bool:
        if commit not in contained:
            contained[commit] = commit_contains(repository=repository, commit=base, ancestor=commit)
        return contained[commit]

    checks = memory_citations_verify(
        owner=run.task.project.owner,
        memories=cited,
        commit=base,
        read_files=lambda paths: files_at_commit(repository=repository, commit=base, paths=paths),
        contains=contains,
    )
    return {result.memory.pk: checks.get(result.memory.pk, "") for result in found}


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MEMORY_LINE_MAX_CHARS else line[: MEMORY_LINE_MAX_CHARS - 1] + "…"


def recall_for_phase(run: PipelineRun, agent: str) -> Recall:
    """The memories and notes ``agent`` is given for this phase of ``run``."""
    project = run.task.project
    owner = project.owner
    limit = settings.MEMORY_RECALL_LIMIT
    checks: dict[int, str] = {}
    try:
        found = memory_recall(
            user=owner,
            project=project,
            agent=agent,
            query=recall_query(run, agent),
            paths=recall_paths(run),
            limit=limit + STALE_ROOM if limit > 0 else 0,
            not_from_run=run.pk,
        )
        checks = _checked(run, found)
        found = [result for result in found if checks.get(result.memory.pk) != CitationStatus.GONE][:limit]
    except Exception:
        # Memory helps a run; it must not stop one (the embedder, the index or git failing).
        logger.exception("Run %s: could not recall memories for the %s", run.pk, agent)
        found = []
    memories: list[dict[str, Any]] = [
        {
            "id": result.memory.pk,
            "content": result.memory.content,
            "score": round(result.score, 4),
            "path_match": result.path_match,
            "check": checks.get(result.memory.pk, ""),
        }
        for result in found
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
