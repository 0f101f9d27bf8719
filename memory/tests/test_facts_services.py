"""memory.services.facts and memory.selectors.facts: markers applied, goals completed,
and the memory context the prompts get."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from accounts.models import User
from core.exceptions import Conflict
from memory.models import Fact, Goal
from memory.selectors.facts import memory_prompt_context, memory_system_instructions
from memory.services.facts import (
    CONTENT_REQUIRED,
    fact_create,
    fact_update,
    goal_complete,
    goal_create,
    markers_apply,
)
from projects.models import Project
from projects.selectors import PROJECT_NOT_FOUND

pytestmark = pytest.mark.django_db


def _aged(obj: Fact | Goal, minutes: int) -> None:
    """Make ``obj`` look ``minutes`` old (the tests need a fixed order)."""
    type(obj).objects.filter(pk=obj.pk).update(created_at=timezone.now() - timedelta(minutes=minutes))


# --- markers_apply ---------------------------------------------------------------------


def test_markers_are_stored_stripped_and_confirmed(owner: User) -> None:
    shown, confirmations = markers_apply(
        user=owner,
        text="Got it. [REMEMBER: likes tea] [GOAL: Ship v2 | DEADLINE: Friday] [GOAL: Write docs]",
    )
    assert shown == "Got it."
    assert confirmations == ["Remembered: likes tea", "Goal set: Ship v2 (deadline: Friday)", "Goal set: Write docs"]
    fact = Fact.objects.get()
    assert (fact.user, fact.project, fact.content, fact.source) == (owner, None, "likes tea", "marker")
    assert list(Goal.objects.order_by("id").values_list("text", "deadline", "status", "source")) == [
        ("Ship v2", "Friday", "active", "marker"),
        ("Write docs", "", "active", "marker"),
    ]


def test_markers_without_anything_to_store_change_nothing(owner: User) -> None:
    text = "Use [REMEMBER: fact to remember] and [GOAL: goal text | DEADLINE: optional date]."
    shown, confirmations = markers_apply(user=owner, text=text)
    assert confirmations == []
    assert not Fact.objects.exists() and not Goal.objects.exists()
    assert "[" not in shown


def test_plain_text_is_returned_as_is(owner: User) -> None:
    assert markers_apply(user=owner, text="  Just text.\n") == ("  Just text.\n", [])


def test_markers_with_a_project_store_project_memory(owner: User, project: Project) -> None:
    markers_apply(user=owner, project=project, text="[REMEMBER: uses Postgres] [GOAL: Go live]")
    assert Fact.objects.get().project == project
    assert Goal.objects.get().project == project


def test_done_completes_the_first_active_goal_case_insensitively(owner: User) -> None:
    oldest = goal_create(user=owner, text="Ship the CSV export")
    newer = goal_create(user=owner, text="Ship the PDF EXPORT")
    _aged(oldest, 10)
    before = timezone.now()
    shown, confirmations = markers_apply(user=owner, text="Well done! [DONE: export]")
    assert shown == "Well done!"
    assert confirmations == ["Completed: Ship the CSV export"]
    oldest.refresh_from_db()
    newer.refresh_from_db()
    assert oldest.status == Goal.Status.COMPLETED
    assert oldest.completed_at is not None and oldest.completed_at >= before
    assert newer.status == Goal.Status.ACTIVE
    # The next [DONE] finds the next one; matching ignores case on every database.
    assert markers_apply(user=owner, text="[DONE: pdf Export]")[1] == ["Completed: Ship the PDF EXPORT"]


def test_done_without_a_match(owner: User, other_user: User) -> None:
    goal_create(user=other_user, text="Bob's export")
    finished = goal_create(user=owner, text="Old export")
    goal_complete(goal=finished)
    shown, confirmations = markers_apply(user=owner, text="[DONE: export]")
    assert shown == ""
    assert confirmations == ["No matching goal found for: export"]
    assert Goal.objects.filter(user=other_user, status="active").count() == 1


def test_done_in_a_project_looks_at_global_and_that_projects_goals(
    owner: User, project: Project, other_project: Project
) -> None:
    second = Project.objects.create(owner=owner, name="Second")
    goal_create(user=owner, text="Release elsewhere", project=second)
    assert markers_apply(user=owner, project=project, text="[DONE: release]")[1] == [
        "No matching goal found for: release"
    ]
    goal_create(user=owner, text="Release everywhere")
    assert markers_apply(user=owner, project=project, text="[DONE: release]")[1] == ["Completed: Release everywhere"]


def test_a_goal_set_and_done_in_one_reply(owner: User) -> None:
    _, confirmations = markers_apply(user=owner, text="[DONE: tests] [GOAL: Write tests]")
    assert confirmations == ["Goal set: Write tests", "Completed: Write tests"]
    assert Goal.objects.get().status == Goal.Status.COMPLETED


def test_over_long_marker_values_are_shortened_not_lost(owner: User) -> None:
    shown, confirmations = markers_apply(user=owner, text=f"ok [REMEMBER: {'x' * 3000}]")
    assert shown == "ok"
    assert len(Fact.objects.get().content) == 2000
    assert len(confirmations) == 1


# --- services by hand ------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "   \n\t"])
def test_fact_cannot_be_empty(owner: User, content: str) -> None:
    with pytest.raises(ValidationError) as exc:
        fact_create(user=owner, content=content)
    assert exc.value.message_dict == {"content": [CONTENT_REQUIRED]}


def test_fact_cannot_be_too_long(owner: User) -> None:
    with pytest.raises(ValidationError) as exc:
        fact_create(user=owner, content="x" * 2001)
    assert "content" in exc.value.message_dict


def test_fact_cannot_go_to_someone_elses_project(owner: User, other_project: Project) -> None:
    with pytest.raises(ValidationError) as exc:
        fact_create(user=owner, content="x", project=other_project)
    assert exc.value.message_dict == {"project": [PROJECT_NOT_FOUND]}
    fact = fact_create(user=owner, content="x")
    with pytest.raises(ValidationError):
        fact_update(fact=fact, project=other_project)


def test_completing_twice_is_a_conflict(owner: User) -> None:
    goal = goal_create(user=owner, text="Once")
    goal_complete(goal=goal)
    with pytest.raises(Conflict):
        goal_complete(goal=goal)


# --- memory_prompt_context -------------------------------------------------------------


def test_context_is_empty_without_memory(owner: User) -> None:
    assert memory_prompt_context(user=owner) == ""


def test_context_format(owner: User) -> None:
    for minutes, content in ((30, "a"), (20, "b"), (10, "c")):
        _aged(fact_create(user=owner, content=content), minutes)
    _aged(goal_create(user=owner, text="Ship v2", deadline="Friday"), 5)
    goal_create(user=owner, text="Write docs")
    goal_complete(goal=goal_create(user=owner, text="Finished one"))
    assert memory_prompt_context(user=owner) == (
        "[Memory Context]\nFacts: c; b; a\nActive Goals:\n- Write docs\n- Ship v2 (deadline: Friday)"
    )


def test_context_with_facts_only_or_goals_only(owner: User, other_user: User) -> None:
    fact_create(user=owner, content="likes\ntea")
    goal_create(user=other_user, text="Bob's goal")
    assert memory_prompt_context(user=owner) == "[Memory Context]\nFacts: likes tea"
    assert memory_prompt_context(user=other_user) == "[Memory Context]\nActive Goals:\n- Bob's goal"


def test_context_keeps_the_50_newest_facts_and_20_newest_active_goals(owner: User) -> None:
    for number in range(60):
        _aged(fact_create(user=owner, content=f"f{number}"), 1000 - number)
    for number in range(25):
        _aged(goal_create(user=owner, text=f"g{number}"), 1000 - number)
    lines = memory_prompt_context(user=owner).split("\n")
    assert lines[1] == "Facts: " + "; ".join(f"f{number}" for number in range(59, 9, -1))
    assert lines[2] == "Active Goals:"
    assert lines[3:] == [f"- g{number}" for number in range(24, 4, -1)]


def test_context_for_a_project_is_global_plus_that_project(
    owner: User, project: Project, django_assert_num_queries
) -> None:
    second = Project.objects.create(owner=owner, name="Second")
    _aged(fact_create(user=owner, content="global"), 3)
    _aged(fact_create(user=owner, content="here", project=project), 2)
    _aged(fact_create(user=owner, content="elsewhere", project=second), 1)
    goal_create(user=owner, text="Elsewhere goal", project=second)
    with django_assert_num_queries(2):
        context = memory_prompt_context(user=owner, project=project)
    assert context == "[Memory Context]\nFacts: here; global"
    assert memory_prompt_context(user=owner) == (
        "[Memory Context]\nFacts: elsewhere; here; global\nActive Goals:\n- Elsewhere goal"
    )


def test_system_instructions_teach_the_markers_with_the_date() -> None:
    text = memory_system_instructions()
    for example in (
        "[REMEMBER: fact to remember]",
        "[GOAL: goal text | DEADLINE: optional date]",
        "[DONE: search text]",
    ):
        assert example in text
    assert f"Current date: {timezone.now():%A %Y-%m-%d} UTC" in text
    assert text.rstrip().endswith("UTC")


def test_system_instructions_do_not_change_within_the_day() -> None:
    """The system prompt is the cached prefix: no clock to the minute in it."""
    morning = datetime(2026, 11, 23, 8, 1, tzinfo=UTC)
    texts = set()
    for minutes in (0, 1, 59, 600):
        with mock.patch("django.utils.timezone.now", return_value=morning + timedelta(minutes=minutes)):
            texts.add(memory_system_instructions())
    assert len(texts) == 1
    assert "08:01" not in texts.pop()


def test_instruction_examples_echoed_by_an_agent_are_not_stored(owner: User) -> None:
    _, confirmations = markers_apply(user=owner, text=memory_system_instructions())
    assert confirmations == []
    assert not Fact.objects.exists() and not Goal.objects.exists()
