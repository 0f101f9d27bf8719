"""Reads of agent notes and daily logs, and their markdown exports."""

from __future__ import annotations

import re
from datetime import date
from typing import TYPE_CHECKING

from django.db.models import Count, QuerySet

from memory.models import AgentNote, DailyLogEntry

if TYPE_CHECKING:
    from accounts.models import User


def notes_list_for_user(*, user: User) -> QuerySet[AgentNote]:
    return AgentNote.objects.filter(owner=user).annotate(revision_count=Count("revisions")).order_by("agent_id")


def notes_get_for_user(*, user: User, agent_id: str) -> AgentNote | None:
    """The agent's notes, or None when it has none yet (an empty notebook, not an error)."""
    return notes_list_for_user(user=user).filter(agent_id=agent_id).first()


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


def notes_markdown(*, agent_id: str, note: AgentNote | None) -> str:
    content = note.content.strip() if note else ""
    return f"# Notes of {agent_id}\n\n{content}\n" if content else f"# Notes of {agent_id}\n\n_No notes yet._\n"


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
