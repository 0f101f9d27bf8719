"""A run's lineage (pipelines.agents.lineage): a real pipeline run (against the fake Anthropic
server) leaves its lineage in the context store and every agent call in the agents' daily
logs; the context API's ``?run=`` list and the lineage page read it back."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from memory.models import ContextItem, DailyLogEntry
from memory.services.context import context_decode, context_save
from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus
from pipelines.phases.driver import run_advance
from pipelines.runs.services import run_cancel, run_start
from tasks.models import Task
from tests.api_helpers import assert_error
from tests.factories import TaskFactory
from tests.fake_anthropic import HttpError, ToolReply, coder_creates, coder_replaces
from tests.threads import DatabaseThread
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CODER = coder_creates("app/x.py", "x = 1\n", summary="Added x.")
FIX = coder_replaces("app/x.py", "x = 1", "x = 2", summary="x is 2 now.")
PASS = {"pass": True, "findings": []}
FAIL = {"pass": False, "findings": [{"file": "app/x.py", "line": 1, "severity": "major", "message": "x must be 2"}]}


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def _output(run: PipelineRun, type: str) -> list[ContextItem]:
    return list(ContextItem.objects.filter(run=run, type=type).order_by("created_at"))


def test_a_run_leaves_its_lineage_and_daily_log(fake_llm, task, owner, owner_client, other_client, client) -> None:
    fake_llm.script(
        ToolReply(input={"subtasks": [{"id": "s1"}]}),  # invalid, retried
        ToolReply(input=PLAN),
        *CODER,
        ToolReply(input=FAIL),
        *FIX,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL

    (task_item,) = _output(run, "task")
    (plan,) = _output(run, "plan")
    changes, fixed = _output(run, "changes")
    failed_review, passed_review = _output(run, "review")
    assert all(item.owner_id == owner.pk for item in ContextItem.objects.all())
    assert task_item.agent_id == "planner" and task_item.parent_ids == []
    assert context_decode(task_item)["title"] == "Add x"
    assert context_decode(plan)["output"] == PLAN
    assert plan.parent_ids == [task_item.pk]
    assert plan.metadata["input_id"] == task_item.pk
    # The Coder's first changes come from the plan; the fix from the plan and the review.
    assert changes.parent_ids[0] == plan.pk and failed_review.pk not in changes.parent_ids
    assert fixed.parent_ids[:2] == [plan.pk, failed_review.pk]
    # A Coder's item is its whole conversation: each edit and what came of it, the files.
    output = context_decode(fixed)["output"]
    assert output["summary"] == "x is 2 now."
    assert [(step["tool"], step["input"]["command"], step["is_error"]) for step in output["steps"]] == [
        ("str_replace_based_edit_tool", "str_replace", False)
    ]
    assert output["steps"][0]["input"]["new_str"] == "x = 2"
    assert output["files"] == [{"file_path": "app/x.py", "action": "create"}]
    assert output["head_commit"] == run.head_commit
    assert failed_review.parent_ids[0] == changes.pk
    assert passed_review.parent_ids[0] == fixed.pk
    assert context_decode(passed_review)["output"] == PASS
    prompt_items = _output(run, "prompt")
    assert len(prompt_items) == 5  # coder ×2, reviewer ×2, the distiller of the fixed finding
    assert "x must be 2" in context_decode(ContextItem.objects.get(pk=fixed.metadata["input_id"]))["prompt"]

    # Every call is in the daily log, the invalid one as an error.
    entries = list(DailyLogEntry.objects.filter(owner=owner).order_by("created_at", "id"))
    assert [(e.agent_id, e.status) for e in entries] == [
        ("planner", "error"),
        ("planner", "ok"),
        ("coder", "ok"),
        ("coder", "ok"),
        ("reviewer", "ok"),
        ("coder", "ok"),
        ("coder", "ok"),
        ("reviewer", "ok"),
        ("distiller", "ok"),
    ]
    assert AgentCall.objects.filter(run=run).count() == len(entries)
    assert entries[0].error.startswith("Invalid output: ")
    assert "'title' is a required property" in entries[0].error
    assert entries[0].output_context_id == ""
    assert {e.session for e in entries} == {f"run-{run.pk}"}
    assert {e.date for e in entries} == {timezone.localdate()}
    assert entries[1].output_context_id == plan.pk and entries[1].type == "plan"
    assert entries[1].input_context_ids == [task_item.pk]
    # The Coder's turns are logged one by one; its lineage item is the conversation's.
    assert [e.output_context_id for e in entries if e.agent_id == "coder"] == ["", "", "", ""]
    assert entries[7].output_context_id == passed_review.pk

    # The API gives the run's lineage; the page shows it; both only to the owner.
    rows = owner_client.get("/api/memory/contexts", {"run": run.pk}).json()
    assert [row["type"] for row in rows][:2] == ["task", "plan"]
    # task, plan, changes ×2, review ×2, prompts ×5 (with the distiller's), the distiller's lessons
    assert len(rows) == ContextItem.objects.filter(run=run).count() == 12
    assert other_client.get("/api/memory/contexts", {"run": run.pk}).status_code == 404
    graph = owner_client.get(f"/api/memory/contexts/{plan.pk}/lineage").json()
    assert passed_review.pk in {node["id"] for node in graph["nodes"]}

    client.force_login(owner)
    page = client.get(f"/memory/runs/{run.pk}/lineage")
    assert page.status_code == 200
    html = page.content.decode()
    assert plan.pk in html and "x must be 2" in html
    assert f'href="#{plan.pk}"' in html
    # The run panel links to it.
    detail = client.get(f"/tasks/{task.pk}")
    assert f"/memory/runs/{run.pk}/lineage" in detail.content.decode()


def test_failed_calls_are_logged_as_errors(fake_llm, task, owner) -> None:
    fake_llm.script(HttpError(429, "rate_limit_error", headers={"retry-after": "0"}), ToolReply(input=PLAN))
    run = run_start(task=task, user=owner)
    run_advance(run_id=run.pk)
    entries = list(DailyLogEntry.objects.filter(owner=owner, agent_id="planner").order_by("created_at", "id"))
    assert [e.status for e in entries] == ["error", "ok"]
    assert entries[0].error and entries[0].output_context_id == ""

    fake_llm.script(HttpError(401, "authentication_error"))
    run_advance(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    coder = DailyLogEntry.objects.get(owner=owner, agent_id="coder")
    assert coder.status == "error"


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_call_is_logged_as_cancelled(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN, text="slow " * 400, chunk_size=5, chunk_delay=0.02))
    run = run_start(task=task, user=owner)
    worker = DatabaseThread(target=run_advance, kwargs={"run_id": run.pk})
    worker.start()
    deadline = time.monotonic() + 5
    while not RunEvent.objects.filter(task=task, type="agent-log").exists():
        assert time.monotonic() < deadline, "the stream never started"
        time.sleep(0.05)
    run_cancel(run=run, actor=owner)
    worker.join(timeout=5)
    entry = DailyLogEntry.objects.get(owner=owner, agent_id="planner")
    assert entry.status == "cancelled"
    assert not ContextItem.objects.filter(run=run).exists()


def test_two_runs_do_not_share_items(fake_llm, task, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    first = drive_in_process(run_start(task=task, user=owner))
    other_task = TaskFactory(project=task.project, title="Add x", description="x should exist")
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    second = drive_in_process(run_start(task=other_task, user=owner))
    assert ContextItem.objects.filter(run=first).count() == ContextItem.objects.filter(run=second).count() == 6


def test_the_lineage_page_is_the_owners_only(fake_llm, task, owner, other_user, client) -> None:
    fake_llm.script(ToolReply(input=PLAN))
    run = run_start(task=task, user=owner)
    run_advance(run_id=run.pk)
    client.force_login(other_user)
    assert client.get(f"/memory/runs/{run.pk}/lineage").status_code == 404
    client.logout()
    response = client.get(f"/memory/runs/{run.pk}/lineage")
    assert response.status_code == 302 and "login" in response["Location"]


def test_list_by_run_is_the_runs_lineage(owner, project, other_user, owner_client, other_client) -> None:
    run = PipelineRun.objects.create(task=TaskFactory(project=project), number=1)
    task_item, _ = context_save(owner=owner, run_id=run.pk, type="task", content="t")
    plan, _ = context_save(owner=owner, run_id=run.pk, type="plan", content="p", parent_ids=[task_item.pk])
    context_save(owner=owner, type="unrelated", content="u")
    rows = owner_client.get("/api/memory/contexts", {"run": run.pk}).json()
    assert [(row["type"], row["parent_ids"], row["run"]) for row in rows] == [
        ("task", [], run.pk),
        ("plan", [task_item.pk], run.pk),
    ]
    assert plan.access_count == 0
    assert_error(other_client.get("/api/memory/contexts", {"run": run.pk}), 404, "not_found")
    assert_error(owner_client.get("/api/memory/contexts", {"run": 999999}), 404, "not_found")
