"""Reads of facts and goals, and the memory block that goes into agent prompts."""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, TypeVar

from django.db.models import Q, QuerySet
from django.utils import timezone

from core.selectors import one_or_not_found
from memory.models import Fact, Goal

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project

Row = TypeVar("Row", Fact, Goal)

FACT_NOT_FOUND = "Fact not found."
GOAL_NOT_FOUND = "Goal not found."
CONTEXT_FACTS = 50
CONTEXT_GOALS = 20
CONTEXT_HEADER = "[Memory Context]"

MEMORY_INSTRUCTIONS = """\
[Memory]
You can keep memory across conversations by writing markers in your reply. They are
removed from the text the user sees and confirmed to them.
- [REMEMBER: fact to remember] stores a fact about the user or the work.
- [GOAL: goal text | DEADLINE: optional date] sets a goal; the deadline part is optional.
- [DONE: search text] completes the first active goal whose text contains the search text.
Use them only for things worth keeping; never repeat facts already in the memory context."""


def _normalized(text: str) -> str:
    return " ".join(text.split())


def _scoped(queryset: QuerySet[Row], *, user: User, project: Project | None) -> QuerySet[Row]:
    """The user's rows; with a project, the global ones (no project) plus that project's."""
    queryset = queryset.filter(user=user)
    if project is not None:
        queryset = queryset.filter(Q(project__isnull=True) | Q(project=project))
    return queryset


def fact_list(*, user: User, project: Project | None = None) -> QuerySet[Fact]:
    """The user's facts, newest first; with a project, only that project's."""
    facts = Fact.objects.filter(user=user)
    if project is not None:
        facts = facts.filter(project=project)
    return facts.order_by("-created_at", "-id")


def goal_list(*, user: User, status: str | None = None, project: Project | None = None) -> QuerySet[Goal]:
    """The user's goals, newest first (completed ones by completion time)."""
    goals = Goal.objects.filter(user=user)
    if project is not None:
        goals = goals.filter(project=project)
    if status:
        goals = goals.filter(status=status)
    if status == Goal.Status.COMPLETED:
        return goals.order_by("-completed_at", "-id")
    return goals.order_by("-created_at", "-id")


def fact_get_for_user(*, user: User, fact_id: object) -> Fact:
    """The user's fact, or NotFound — also when it exists but is someone else's."""
    return one_or_not_found(Fact.objects.filter(user=user), fact_id, FACT_NOT_FOUND)


def goal_get_for_user(*, user: User, goal_id: object) -> Goal:
    """The user's goal, or NotFound — also when it exists but is someone else's."""
    return one_or_not_found(Goal.objects.filter(user=user), goal_id, GOAL_NOT_FOUND)


def goal_find_active(*, user: User, search_text: str, project: Project | None = None) -> Goal | None:
    """The first (oldest) active goal whose text contains ``search_text``, ignoring case.

    Compared in Python with casefold, so that matching is the same on SQLite (whose
    LIKE ignores case for ASCII only) and PostgreSQL.
    """
    needle = _normalized(search_text).casefold()
    if not needle:
        return None
    active = _scoped(Goal.objects.filter(status=Goal.Status.ACTIVE), user=user, project=project)
    for goal in active.order_by("created_at", "id").iterator():
        if needle in _normalized(goal.text).casefold():
            return goal
    return None


def memory_prompt_context(*, user: User, project: Project | None = None) -> str:
    """The memory block that goes into every agent prompt (facts and goals).

    The 50 newest facts and 20 newest active goals of the user — with a project, the
    global ones plus that project's. Empty string when there is nothing to remember.
    """
    facts = [
        _normalized(content)
        for content in _scoped(Fact.objects.all(), user=user, project=project)
        .order_by("-created_at", "-id")
        .values_list("content", flat=True)[:CONTEXT_FACTS]
    ]
    goals = list(
        _scoped(Goal.objects.filter(status=Goal.Status.ACTIVE), user=user, project=project)
        .order_by("-created_at", "-id")
        .values_list("text", "deadline")[:CONTEXT_GOALS]
    )
    if not facts and not goals:
        return ""
    lines = [CONTEXT_HEADER]
    if facts:
        lines.append("Facts: " + "; ".join(facts))
    if goals:
        lines.append("Active Goals:")
        for text, deadline in goals:
            suffix = f" (deadline: {_normalized(deadline)})" if deadline.strip() else ""
            lines.append(f"- {_normalized(text)}{suffix}")
    return "\n".join(lines)


def memory_system_instructions() -> str:
    """What agents and the assistant are told about the markers, with today's date
    (so that relative deadlines like "next Friday" can be resolved).

    The date, not the time: this text is part of the system prompt, which is the
    cached prompt prefix (prompt caching, llm.providers.anthropic). A clock to the
    minute changed the prefix every minute and no call ever read it from cache; the
    date changes it once a day, and day resolution is all a deadline needs."""
    now = timezone.now().astimezone(UTC)
    return f"{MEMORY_INSTRUCTIONS}\nCurrent date: {now:%A %Y-%m-%d} UTC"
