"""A task's spending ceiling over all its runs and rounds (pipelines/runs/ceiling.py):
reaching it pauses the work with a clear message, before another round or another
call; Retry after raising it goes on."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipelines.models import AgentCall, RunStatus, RunTransition
from pipelines.review.services import run_request_changes
from pipelines.runs.ceiling import SPEND_CEILING, SPEND_CEILING_REACHED, SpendCeilingReached
from pipelines.runs.selectors import task_spend
from pipelines.runs.services import run_retry, run_start
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import ToolReply, coder_creates, coder_replaces
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CODER = coder_creates("app/x.py", "x = 1\n")
FIX = coder_replaces("app/x.py", "x = 1", "x = 2")
PASS = {"pass": True, "findings": []}
FAIL = {"pass": False, "findings": [{"file": "app/x.py", "line": 1, "severity": "major", "message": "x must be 2"}]}
# A review of a million input tokens costs $3 (claude-sonnet-4-6: $3 per million in).
COSTLY = {"input_tokens": 1_000_000, "output_tokens": 10}


@pytest.fixture(autouse=True)
def _no_token_budget(settings) -> None:
    """The costly calls here are a million tokens: the per-run token budget stays out of it."""
    settings.RUN_TOKEN_BUDGET = 0


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def _ceiling(project, amount: str | None) -> None:
    project.task_spend_ceiling_usd = None if amount is None else Decimal(amount)
    project.save(update_fields=["task_spend_ceiling_usd"])


def test_a_failing_review_loop_pauses_at_the_ceiling_and_retry_after_raising_it_goes_on(
    fake_llm, task, project, owner
) -> None:
    _ceiling(project, "2.00")
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=FAIL, **COSTLY))
    run = drive_in_process(run_start(task=task, user=owner))

    # The review failed and spent the ceiling: the fix round does not start.
    assert run.status == RunStatus.PAUSED
    assert run.phase == RunStatus.FIXING
    assert run.pause_kind == SPEND_CEILING
    assert run.error_retryable
    spent = task_spend(task_id=task.pk)
    assert spent > Decimal("3")
    assert run.error == SPEND_CEILING_REACHED.format(spent=f"${spent.quantize(Decimal('0.01'))}", ceiling="$2.00")
    assert "This task has spent $3.0" in run.error and "of its $2.00 ceiling" in run.error
    assert len(fake_llm.requests) == 4, "no further model call"
    # Nothing is lost: the review's findings wait for the fix round.
    assert run.review_findings[0]["message"] == "x must be 2"
    statuses = list(RunTransition.objects.filter(run=run).values_list("to_status", flat=True))
    assert statuses == ["queued", "planning", "coding", "reviewing", "fixing", "paused"]

    # Still at the ceiling: Retry says so at once, and nothing starts.
    with pytest.raises(SpendCeilingReached):
        run_retry(run=run, actor=owner)

    _ceiling(project, "10.00")
    fake_llm.script(*FIX, ToolReply(input=PASS))
    run = drive_in_process(run_retry(run=run, actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.pause_kind == "" and run.error == ""
    assert run.file_changes[0]["content"] == "x = 2\n"
    assert "x must be 2" in fake_llm.requests[4].prompt_text, "the fix round had the findings"


def test_the_ceiling_is_checked_before_every_turn_not_only_every_round(fake_llm, task, project, owner) -> None:
    _ceiling(project, "1.00")
    create, _done = CODER
    # The Coder's first turn ($1.50) spends the ceiling: its next turn is not bought.
    fake_llm.script(ToolReply(input=PLAN), ToolReply(name=create.name, input=create.input, input_tokens=500_000))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.PAUSED
    assert run.phase == RunStatus.CODING
    assert run.pause_kind == SPEND_CEILING
    assert list(AgentCall.objects.filter(run=run).values_list("agent", flat=True)) == ["planner", "coder"]


def test_every_run_of_the_task_counts_and_a_new_run_pauses_before_planning(fake_llm, task, project, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN, **COSTLY), *CODER, ToolReply(input=PASS))
    first = drive_in_process(run_start(task=task, user=owner))
    assert first.status == RunStatus.AWAITING_APPROVAL
    _ceiling(project, "3.00")

    second = drive_in_process(run_retry(run=first, actor=owner))  # a new run
    assert second.pk != first.pk
    assert second.status == RunStatus.PAUSED
    assert second.phase == RunStatus.PLANNING
    assert second.pause_kind == SPEND_CEILING
    assert len(fake_llm.requests) == 4


def test_a_request_for_changes_pauses_before_its_round_and_keeps_the_feedback(fake_llm, task, project, owner) -> None:
    project.learn_distil = False
    project.save(update_fields=["learn_distil"])
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS, **COSTLY))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    _ceiling(project, "1.00")

    run = drive_in_process(run_request_changes(run=run, feedback="Make it 2", actor=owner))
    assert run.status == RunStatus.PAUSED and run.phase == RunStatus.CODING
    assert run.pause_kind == SPEND_CEILING
    assert run.feedback == "Make it 2"
    assert len(fake_llm.requests) == 4

    _ceiling(project, "0")  # no ceiling for this project
    fake_llm.script(*FIX, ToolReply(input=PASS))
    run = drive_in_process(run_retry(run=run, actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert "Make it 2" in fake_llm.requests[4].prompt_text


def test_the_servers_ceiling_applies_where_the_project_sets_none(fake_llm, task, owner, settings) -> None:
    settings.TASK_SPEND_CEILING_USD = 0.5
    fake_llm.script(ToolReply(input=PLAN, **COSTLY))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.PAUSED and run.phase == RunStatus.CODING
    assert "of its $0.50 ceiling" in run.error


def test_the_paused_run_page_says_what_to_do(fake_llm, task, project, owner, client) -> None:
    _ceiling(project, "2.00")
    fake_llm.script(ToolReply(input=PLAN, **COSTLY))
    drive_in_process(run_start(task=task, user=owner))
    client.force_login(owner)
    page = client.get(f"/tasks/{task.pk}").content.decode()
    assert 'data-testid="spend-ceiling-reached"' in page
    assert "Raise the ceiling in the project&#x27;s settings, then Retry." in page
    assert f"/projects/{project.pk}/edit" in page
    assert "$3.00 / $2.00" in page  # the run page's spend against the ceiling


def test_an_idle_loop_without_a_ceiling_is_unchanged(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN, **COSTLY), *CODER, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL


def test_the_api_shows_spend_against_the_ceiling_and_retry_at_the_ceiling_is_409(
    fake_llm, task, project, owner, owner_client
) -> None:
    _ceiling(project, "2.00")
    fake_llm.script(ToolReply(input=PLAN, **COSTLY))
    run = drive_in_process(run_start(task=task, user=owner))
    body = owner_client.get(f"/api/runs/{run.pk}").json()
    assert body["status"] == "paused" and body["pause_kind"] == SPEND_CEILING
    assert body["task_spend"]["ceiling_usd"] == "2.00"
    assert Decimal(body["task_spend"]["spent_usd"]) == task_spend(task_id=task.pk)
    assert body["task_spend"]["reached"] is True
    refused = owner_client.post(f"/api/runs/{run.pk}/retry")
    assert refused.status_code == 409
    assert refused.json()["code"] == "spend_ceiling_reached"
    assert refused.json()["message"].startswith("This task has spent $3.00 of its $2.00 ceiling.")
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED


def test_the_card_shows_spend_against_the_ceiling(owner, project, client, settings) -> None:
    from pipelines.runs.costs import run_usage_add
    from pipelines.runs.services import run_transition

    settings.ANTHROPIC_API_KEY = "sk-ant-test-key"
    task = TaskFactory(project=project)
    run = run_transition(run=run_start(task=task, user=owner), to_status=RunStatus.PLANNING, enqueue=False)
    run_usage_add(run=run, input_tokens=0, output_tokens=0, cost=Decimal("1.2"))
    client.force_login(owner)
    card = client.get(f"/tasks/{task.pk}/card").content.decode()
    assert 'class="card-cost"' in card and "$1.2000" in card  # no ceiling: the cost as before
    _ceiling(project, "5")
    card = client.get(f"/tasks/{task.pk}/card").content.decode()
    assert 'data-testid="card-spend"' in card
    assert "$1.20 / $5.00" in card
    assert "is-reached" not in card
    _ceiling(project, "1")
    assert "is-reached" in client.get(f"/tasks/{task.pk}/card").content.decode()
    board = client.get("/").content.decode()
    assert "$1.20 / $1.00" in board
