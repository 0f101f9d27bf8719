"""Reads of agent notes and daily logs, and their markdown exports.

An agent has global notes (given in every project) and notes per project; a line may
refer to a memory (memory.references), resolved here to the memory's current text each
time a note is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from core.converters import MAX_ID
from memory.models import AgentNote, DailyLogEntry, Memory
from memory.references import MEMORY_REFERENCE, referenced_memory_ids
from memory.selectors.semantic import memory_confidence

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project

NOTES_GLOBAL = "global"
NOTES_PROJECT = "project"
NOTES_CUT = "[…earlier notes left out]\n"
GLOBAL_NOTES_HEADING = "## For every project"
PROJECT_NOTES_HEADING = "## For this project ({name})"
DELETED_MEMORY = "(memory deleted)"
# A referenced memory is one line of a prompt, like a recalled one.
REFERENCE_MAX_CHARS = 1000


def notes_list_for_user(*, user: User) -> QuerySet[AgentNote]:
    return (
        AgentNote.objects.filter(owner=user)
        .select_related("project")
        .annotate(revision_count=Count("revisions"))
        .order_by("agent_id", "project_id")
    )


def notes_get_for_user(*, user: User, agent_id: str, project: Project | None = None) -> AgentNote | None:
    """The agent's global notes, or its notes in ``project`` (already checked to be the
    user's); None when it has none yet (an empty notebook, not an error)."""
    return notes_list_for_user(user=user).filter(agent_id=agent_id, project=project).first()


def notes_of_agent_for_user(*, user: User, agent_id: str) -> list[AgentNote]:
    """All the agent's notes: the global ones first, then each project's by name."""
    notes = notes_list_for_user(user=user).filter(agent_id=agent_id)
    return sorted(notes, key=lambda note: (note.project is not None, note.project.name.lower() if note.project else ""))


def notes_memories_live(
    *,
    owner: User,
    memory_ids: Iterable[int],
    project: Project | None = None,
    for_agents: bool = False,
    now: datetime | None = None,
) -> dict[int, str]:
    """The current text of each memory among ``memory_ids`` a note may show: the
    owner's, not deleted, not faded to confidence 0 and, given ``project``, not scoped
    to another project (global memories and those of no project are in every one). The
    others are left out: a note drops what refers to them.

    ``for_agents``: what a prompt's notes may give, which leaves out besides the stale
    memories (their code is gone) and those about some files only — recall gives those
    to a task touching their files (memory_recall), the notes would give them to all."""
    ids = {memory_id for memory_id in memory_ids if 0 < memory_id <= MAX_ID}
    if not ids:
        return {}
    memories = Memory.objects.filter(owner=owner, is_deleted=False, pk__in=ids).only(
        "id", "content", "decay_policy", "created_at", "last_reinforced_at", "half_life_hours"
    )
    if for_agents:
        memories = memories.filter(stale_at__isnull=True, path_scoped=False)
    if project is not None:
        memories = memories.filter(Q(project__isnull=True) | Q(project=project) | Q(is_global=True))
    now = now or timezone.now()
    return {memory.pk: memory.content for memory in memories if memory_confidence(memory=memory, now=now) > 0.0}


def _quoted(content: str) -> str:
    line = " ".join(content.split())
    return f"“{line if len(line) <= REFERENCE_MAX_CHARS else line[: REFERENCE_MAX_CHARS - 1] + '…'}”"


def notes_text_resolved(text: str, memories: dict[int, str]) -> str:
    """``text`` with each reference replaced by its memory's text, quoted; a line that
    refers to a memory not in ``memories`` (notes_memories_live) is dropped whole, so a
    deleted lesson takes its bullet with it."""
    kept = []
    for line in text.splitlines():
        if not referenced_memory_ids(line) <= memories.keys():
            continue
        kept.append(MEMORY_REFERENCE.sub(lambda found: _quoted(memories[int(found.group(1))]), line))
    return "\n".join(kept)


def notes_text_marked(text: str, memories: dict[int, str], *, live: Callable[[int, str], str], gone: str) -> str:
    """``text`` with each reference replaced by ``live(id, content)`` or, for a memory
    not in ``memories``, by ``gone``: for a person, who should see that a note said
    something there (the page, the markdown export)."""

    def replace(found: re.Match[str]) -> str:
        memory_id = int(found.group(1))
        return live(memory_id, memories[memory_id]) if memory_id in memories else gone

    return MEMORY_REFERENCE.sub(replace, text)


@dataclass(frozen=True)
class PromptNotes:
    """The notes as an agent is given them, and what went in."""

    text: str
    # Characters of the notes given (their headings aside), and whether any was cut.
    chars: int
    cut: bool
    # Which notes: NOTES_GLOBAL, NOTES_PROJECT, in the order given.
    given: tuple[str, ...]


def _fair_shares(lengths: list[int], total: int) -> list[int]:
    """Each note's share of ``total`` characters: a note shorter than an even share is
    given whole and the rest is split evenly among the longer ones, so one project's long
    record of approvals never crowds out what a person wrote for every project."""
    shares = [0] * len(lengths)
    left = total
    by_length = sorted(range(len(lengths)), key=lambda index: lengths[index])
    for position, index in enumerate(by_length):
        shares[index] = min(lengths[index], left // (len(lengths) - position))
        left -= shares[index]
    return shares


def notes_for_prompt(
    *, owner: User, agent_id: str, project: Project, max_chars: int, now: datetime | None = None
) -> PromptNotes | None:
    """The agent's notes for a call in ``project``: its global notes, then the project's,
    each with its references resolved now (notes_text_resolved), so an edited memory is
    given in its new wording and a deleted or faded one not at all. At most
    ``max_chars`` characters, the newest part of each note kept (notes grow at the end).
    None when there is nothing to give."""
    if max_chars <= 0:
        return None
    found = {
        note.project_id is None: note
        for note in AgentNote.objects.filter(owner=owner, agent_id=agent_id).filter(
            Q(project__isnull=True) | Q(project=project)
        )
    }
    notes = [
        (NOTES_GLOBAL, GLOBAL_NOTES_HEADING, found.get(True)),
        (NOTES_PROJECT, PROJECT_NOTES_HEADING.format(name=project.name), found.get(False)),
    ]
    live = notes_memories_live(
        owner=owner,
        memory_ids=[pk for _, _, note in notes if note is not None for pk in referenced_memory_ids(note.content)],
        project=project,
        for_agents=True,
        now=now,
    )
    texts = [
        (kind, heading, text)
        for kind, heading, note in notes
        if note is not None and (text := notes_text_resolved(note.content, live).strip())
    ]
    if not texts:
        return None
    sections, given, chars, cut = [], [], 0, False
    for (kind, heading, text), share in zip(texts, _fair_shares([len(t) for _, _, t in texts], max_chars), strict=True):
        if share <= 0:
            continue
        shortened = len(text) > share
        kept = text[-share:] if shortened else text
        sections.append(f"{heading}\n{NOTES_CUT if shortened else ''}{kept}")
        given.append(kind)
        chars += len(kept)
        cut = cut or shortened
    if not sections:
        return None
    return PromptNotes(text="\n\n".join(sections), chars=chars, cut=cut, given=tuple(given))


def notes_agents_for_user(*, user: User) -> list[str]:
    """Agents with notes or daily log entries, sorted."""
    with_notes = set(AgentNote.objects.filter(owner=user).values_list("agent_id", flat=True))
    with_logs = set(DailyLogEntry.objects.filter(owner=user).values_list("agent_id", flat=True).distinct())
    return sorted(with_notes | with_logs)


def daily_log_for_user(*, user: User, agent_id: str, day: date) -> QuerySet[DailyLogEntry]:
    return DailyLogEntry.objects.filter(owner=user, agent_id=agent_id, date=day).order_by("created_at", "id")


def daily_log_sessions(entries: QuerySet[DailyLogEntry] | list[DailyLogEntry]) -> list[dict[str, object]]:
    """Entries grouped by session, in the order sessions first appear."""
    sessions: dict[str, list[DailyLogEntry]] = {}
    for entry in entries:
        sessions.setdefault(entry.session, []).append(entry)
    return [{"session": name, "entries": items} for name, items in sessions.items()]


# A daily log session may have a page in a higher layer (a pipeline run's "run-<id>"
# sessions: the run's lineage). That layer registers at start-up the sessions' prefix and
# the URL name of their page, which takes the id.
_session_pages: dict[str, str] = {}


def daily_log_session_page_register(*, prefix: str, url_name: str) -> None:
    _session_pages[prefix] = url_name


def daily_log_session_page(session: str) -> tuple[str, int] | None:
    """``(URL name, id)`` of the session's page, or None when it has none."""
    for prefix, url_name in _session_pages.items():
        if match := re.fullmatch(re.escape(prefix) + r"(\d+)", session):
            return url_name, int(match.group(1))
    return None


def notes_markdown(*, agent_id: str, note: AgentNote | None, project: Project | None = None) -> str:
    """The notes as markdown for a person: references as the memory's current text,
    quoted, and a deleted or faded one struck out."""
    title = f"# Notes of {agent_id}" + (f" in {project.name}" if project is not None else "")
    content = note.content.strip() if note else ""
    if note is None or not content:
        return f"{title}\n\n_No notes yet._\n"
    live = notes_memories_live(owner=note.owner, memory_ids=referenced_memory_ids(content), project=project)
    text = notes_text_marked(content, live, live=lambda _id, memory: _quoted(memory), gone=f"~~{DELETED_MEMORY}~~")
    return f"{title}\n\n{text}\n"


def daily_log_markdown(*, agent_id: str, day: date, entries: QuerySet[DailyLogEntry] | list[DailyLogEntry]) -> str:
    lines = [f"# Daily log of {agent_id}, {day.isoformat()}", ""]
    sessions = daily_log_sessions(entries)
    if not sessions:
        lines += ["_Nothing logged._", ""]
    for group in sessions:
        lines += [f"## {group['session']}", ""]
        for entry in group["entries"]:  # type: ignore[attr-defined]
            parts = [
                f"- {entry.created_at:%H:%M:%S} **{entry.type or 'task'}** {entry.status}",
                f"{entry.duration_ms} ms",
            ]
            if entry.input_context_ids:
                parts.append("in: " + ", ".join(f"`{pk}`" for pk in entry.input_context_ids))
            if entry.output_context_id:
                parts.append(f"out: `{entry.output_context_id}`")
            line = " · ".join(parts)
            if entry.error:
                line += f" — {entry.error}"
            if entry.promoted:
                line += " (promoted)"
            lines.append(line)
        lines.append("")
    return "\n".join(lines)
