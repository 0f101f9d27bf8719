"""Prompt caching in a run: the agents' calls carry breakpoints, the cache tokens the API
reports are recorded per call, priced into the run's cost, counted in its input tokens
and its token budget, and shown; the clock is not in the cached prefix."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from llm.pricing import call_cost
from pipelines.agents.turns import BudgetExceeded
from pipelines.agents.turns import budget_check as _check_budget
from pipelines.api.serializers import RunSerializer
from pipelines.models import AgentCall, PipelineRun, RunStatus
from pipelines.runs.costs import run_usage_add
from pipelines.runs.services import run_start
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import ToolReply, coder_creates
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
# The Coder's editing conversation: it creates app/x.py, then says it is done.
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture(autouse=True)
def _short_prompts_are_cached(fake_llm) -> None:
    """A run's prompts here are far below the API's minimum cacheable length, which the
    fake enforces (llm/tests/test_prompt_caching.py); these tests are about recording."""
    fake_llm.min_cacheable_tokens = lambda model: 0


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def test_a_run_records_prices_and_counts_cache_tokens(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    calls = list(AgentCall.objects.filter(run=run))
    for request in fake_llm.requests:
        assert request.body["system"][-1]["cache_control"] == EPHEMERAL
        assert request.body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert all(call.cache_creation_input_tokens > 0 for call in calls)
    for call in calls:
        assert call.cost_usd == call_cost(
            model=call.model,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            cache_creation_input_tokens=call.cache_creation_input_tokens,
            cache_read_input_tokens=call.cache_read_input_tokens,
        )
    assert run.cost_usd == sum(call.cost_usd for call in calls)
    assert run.cache_creation_input_tokens == sum(call.cache_creation_input_tokens for call in calls)
    assert run.cache_read_input_tokens == sum(call.cache_read_input_tokens for call in calls)
    assert run.input_tokens == sum(
        call.input_tokens + call.cache_creation_input_tokens + call.cache_read_input_tokens for call in calls
    )
    data = RunSerializer(run).data
    assert data["cache_creation_input_tokens"] == run.cache_creation_input_tokens
    assert data["cache_read_input_tokens"] == run.cache_read_input_tokens
    assert data["total_tokens"] == run.input_tokens + run.output_tokens


def test_the_clock_is_not_in_the_cached_prefix(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    drive_in_process(run_start(task=task, user=owner))
    for request in fake_llm.requests:
        system = request.system_text
        assert re.search(r"Current date: \w+ \d{4}-\d\d-\d\d UTC", system)
        assert not re.search(r"\d\d:\d\d", system)
        assert "Current time" not in request.prompt_text


def test_usage_with_cache_tokens_lands_on_the_run(task, owner) -> None:
    run = PipelineRun.objects.create(task=task, number=1, model="claude-sonnet-4-5")
    cost = call_cost(
        model=run.model,
        input_tokens=100,
        output_tokens=10,
        cache_creation_input_tokens=2_000,
        cache_read_input_tokens=30_000,
    )
    # 3 * (100 + 1.25 * 2,000 + 0.1 * 30,000) + 15 * 10, per million.
    assert cost == Decimal("0.016950")
    run_usage_add(
        run=run,
        input_tokens=100,
        output_tokens=10,
        cache_creation_input_tokens=2_000,
        cache_read_input_tokens=30_000,
        cost=cost,
    )
    run.refresh_from_db()
    assert (run.input_tokens, run.output_tokens, run.total_tokens) == (32_100, 10, 32_110)
    assert (run.cache_creation_input_tokens, run.cache_read_input_tokens) == (2_000, 30_000)
    assert run.cost_usd == Decimal("0.016950")
    task.refresh_from_db()
    assert task.total_cost == Decimal("0.016950")


def test_cache_tokens_count_in_the_token_budget(task, owner) -> None:
    run = PipelineRun.objects.create(task=task, number=1, token_budget=39_000, max_tokens=1_000)
    run_usage_add(run=run, input_tokens=10, output_tokens=10, cost=Decimal(0), cache_read_input_tokens=38_000)
    run.refresh_from_db()
    with pytest.raises(BudgetExceeded, match="38,020 of its 39,000"):
        _check_budget(run)


def test_a_run_pauses_when_cached_input_spends_its_budget(fake_llm, task, owner, settings) -> None:
    settings.RUN_TOKEN_BUDGET = 1000
    settings.LLM_MAX_TOKENS = 900
    # The reply's uncached input and output alone (20) leave room for the next call;
    # the prompt it wrote to the cache does not.
    fake_llm.script(ToolReply(input=PLAN, input_tokens=10, output_tokens=10))
    run = drive_in_process(run_start(task=task, user=owner))
    planner = AgentCall.objects.get(run=run)
    assert planner.cache_creation_input_tokens > 1000 - 900 - 20
    assert run.status == RunStatus.PAUSED
    assert "budget" in run.error
    assert len(fake_llm.requests) == 1


def test_caching_off_sends_no_breakpoints(fake_llm, task, owner, settings) -> None:
    settings.LLM_PROMPT_CACHING = False
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert all(isinstance(request.body["system"], str) for request in fake_llm.requests)
    assert "cache_control" not in str([request.body for request in fake_llm.requests])
    assert (run.cache_creation_input_tokens, run.cache_read_input_tokens) == (0, 0)


def test_the_run_panel_shows_the_cached_part_of_the_input(client, owner, task) -> None:
    client.force_login(owner)
    run = PipelineRun.objects.create(task=task, number=1)
    run_usage_add(
        run=run,
        input_tokens=100,
        output_tokens=10,
        cost=Decimal(0),
        cache_creation_input_tokens=2_000,
        cache_read_input_tokens=30_000,
    )
    html = client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert "32,100" in html
    assert "(30,000 read from the prompt cache, 2,000 written to it)" in html
