"""Writes of facts and goals, by hand and from markers in replies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.exceptions import Conflict
from memory.markers import parse_markers
from memory.models import Fact, Goal
from memory.models.facts import DEADLINE_MAX_LENGTH, FACT_MAX_LENGTH, GOAL_MAX_LENGTH
from memory.selectors.facts import goal_find_active
from projects.selectors import PROJECT_NOT_FOUND

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project

CONTENT_REQUIRED = "A fact cannot be empty."
TEXT_REQUIRED = "A goal cannot be empty."
GOAL_ALREADY_COMPLETED = "This goal is already completed."
REMEMBERED = "Remembered: {}"
GOAL_SET = "Goal set: {}"
GOAL_SET_WITH_DEADLINE = "Goal set: {} (deadline: {})"
COMPLETED = "Completed: {}"
NO_MATCHING_GOAL = "No matching goal found for: {}"

# Keyword default meaning "leave the project as it is" (None means "no project").
UNCHANGED: Any = object()


def _check_project(*, user: User, project: Project | None) -> None:
    # Someone else's project reads exactly like one that does not exist.
    if project is not None and project.owner_id != user.pk:
        raise ValidationError({"project": [PROJECT_NOT_FOUND]})


def _required(value: str, *, field: str, message: str, max_length: int) -> str:
    cleaned = value.strip()
    if not cleaned:
        raise ValidationError({field: [message]})
    # TextField has no max_length validator of its own: full_clean would not catch it.
    if len(cleaned) > max_length:
        raise ValidationError({field: [f"Ensure this field has no more than {max_length} characters."]})
    return cleaned


def _truncated(value: str, max_length: int) -> str:
    return value if len(value) <= max_length else value[: max_length - 1] + "…"


def _save(obj: Fact | Goal) -> None:
    obj.full_clean(exclude=["user", "project"])
    obj.save()


@transaction.atomic
def fact_create(*, user: User, content: str, project: Project | None = None, source: str = Fact.Source.MANUAL) -> Fact:
    _check_project(user=user, project=project)
    content = _required(content, field="content", message=CONTENT_REQUIRED, max_length=FACT_MAX_LENGTH)
    fact = Fact(user=user, project=project, content=content, source=source)
    _save(fact)
    return fact


@transaction.atomic
def fact_update(*, fact: Fact, content: str | None = None, project: Project | None = UNCHANGED) -> Fact:
    if content is not None:
        fact.content = _required(content, field="content", message=CONTENT_REQUIRED, max_length=FACT_MAX_LENGTH)
    if project is not UNCHANGED:
        _check_project(user=fact.user, project=project)
        fact.project = project
    _save(fact)
    return fact


@transaction.atomic
def fact_delete(*, fact: Fact) -> None:
    fact.delete()


@transaction.atomic
def goal_create(
    *,
    user: User,
    text: str,
    deadline: str = "",
    project: Project | None = None,
    source: str = Fact.Source.MANUAL,
) -> Goal:
    _check_project(user=user, project=project)
    text = _required(text, field="text", message=TEXT_REQUIRED, max_length=GOAL_MAX_LENGTH)
    goal = Goal(user=user, project=project, text=text, deadline=deadline.strip(), source=source)
    _save(goal)
    return goal


@transaction.atomic
def goal_update(
    *, goal: Goal, text: str | None = None, deadline: str | None = None, project: Project | None = UNCHANGED
) -> Goal:
    if text is not None:
        goal.text = _required(text, field="text", message=TEXT_REQUIRED, max_length=GOAL_MAX_LENGTH)
    if deadline is not None:
        goal.deadline = deadline.strip()
    if project is not UNCHANGED:
        _check_project(user=goal.user, project=project)
        goal.project = project
    _save(goal)
    return goal


@transaction.atomic
def goal_complete(*, goal: Goal) -> Goal:
    """Move an active goal to the completed ones, with the time (compare-and-set)."""
    now = timezone.now()
    updated = Goal.objects.filter(pk=goal.pk, status=Goal.Status.ACTIVE).update(
        status=Goal.Status.COMPLETED, completed_at=now, updated_at=now
    )
    if not updated:
        raise Conflict(GOAL_ALREADY_COMPLETED)
    goal.refresh_from_db()
    return goal


@transaction.atomic
def goal_complete_matching(*, user: User, search_text: str, project: Project | None = None) -> Goal | None:
    """Complete the first active goal whose text contains ``search_text`` (ignoring
    case); None when there is none."""
    while (goal := goal_find_active(user=user, search_text=search_text, project=project)) is not None:
        try:
            return goal_complete(goal=goal)
        except Conflict:
            continue  # Completed meanwhile by someone else: look again.
    return None


@transaction.atomic
def goal_delete(*, goal: Goal) -> None:
    goal.delete()


def markers_apply(
    *, user: User, project: Project | None = None, text: str, source: str = Fact.Source.MARKER
) -> tuple[str, list[str]]:
    """Store the markers in a reply and return (the text to show, confirmations).

    Facts and goals are stored first, then [DONE: …] markers run, so that a reply may
    set a goal and complete it. Over-long values are shortened rather than refused:
    a reply is never lost because of its markers.
    """
    parsed = parse_markers(text)
    if parsed.empty:
        return parsed.text, []
    confirmations: list[str] = []
    with transaction.atomic():
        for content in parsed.remember:
            fact = fact_create(user=user, project=project, content=_truncated(content, FACT_MAX_LENGTH), source=source)
            confirmations.append(REMEMBERED.format(fact.content))
        for goal_text, deadline in parsed.goals:
            goal = goal_create(
                user=user,
                project=project,
                text=_truncated(goal_text, GOAL_MAX_LENGTH),
                deadline=_truncated(deadline, DEADLINE_MAX_LENGTH),
                source=source,
            )
            if goal.deadline:
                confirmations.append(GOAL_SET_WITH_DEADLINE.format(goal.text, goal.deadline))
            else:
                confirmations.append(GOAL_SET.format(goal.text))
        for search_text in parsed.done:
            completed = goal_complete_matching(user=user, search_text=search_text, project=project)
            if completed is None:
                confirmations.append(NO_MATCHING_GOAL.format(search_text))
            else:
                confirmations.append(COMPLETED.format(completed.text))
    return parsed.text, confirmations
