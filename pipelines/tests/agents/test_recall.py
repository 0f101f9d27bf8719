"""Recall before every agent call: the memories relevant to the task (this project's and
global ones, unscoped or scoped to the agent) and the agent's notes reach its system
prompt, once per phase; every call records what it was given, and the run panel and
the API show it."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.urls import reverse

from memory.models import AgentNote, ContextItem
from memory.selectors.notes import GLOBAL_NOTES_HEADING, NOTES_CUT
from memory.services.context import context_decode
from memory.services.semantic import memory_create, memory_delete
from pipelines.agents.recall import MEMORIES_HEADING, NOTES_HEADING
from pipelines.models import AgentCall, PipelineRun, RunStatus
from pipelines.runs.services import run_start
from tasks.models import Task
from tests.factories import ProjectFactory, TaskFactory
from tests.fake_anthropic import ToolReply, coder_creates
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {
    "subtasks": [
        {"id": "s1", "title": "Orders view", "description": "A view that returns the orders as JSON", "order": 1}
    ]
}
PASS = {"pass": True, "findings": []}

SNAKE_CASE = "API responses use snake_case field names"
ISO_DATES = "JSON endpoints return ISO 8601 dates"
CURSOR_PAGINATION = "Orders are paginated with cursor pagination in every list endpoint"
UNRELATED = "Deploys go out on Tuesdays"
THEIRS = "API responses use camelCase field names"
FORGOTTEN = "JSON list endpoints are sorted newest first"


def orders_task(project) -> Task:
    return TaskFactory(
        project=project,
        title="Add an endpoint that lists orders as JSON",
        description="Return the signed-in user's orders from /api/orders.",
    )


def run_task(fake_llm, task: Task, owner) -> PipelineRun:
    fake_llm.script(ToolReply(input=PLAN), *coder_creates("app/orders.py", "orders = []\n"), ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    return run


def systems(fake_llm) -> dict[str, list[str]]:
    """Each agent's system prompts, in the order of its calls (planner, coder ×2, reviewer)."""
    planner, coder_edit, coder_done, reviewer = fake_llm.requests
    return {
        "planner": [planner.system_text],
        "coder": [coder_edit.system_text, coder_done.system_text],
        "reviewer": [reviewer.system_text],
    }


@pytest.fixture
def lessons(owner, other_user, project) -> dict[str, int]:
    """The owner's memories in and around the project, and another user's."""
    other_project = ProjectFactory(owner=other_user)
    made = {
        SNAKE_CASE: memory_create(owner=owner, content=SNAKE_CASE, project=project)[0],
        ISO_DATES: memory_create(owner=owner, content=ISO_DATES, is_global=True)[0],
        CURSOR_PAGINATION: memory_create(owner=owner, content=CURSOR_PAGINATION, project=project, agent="coder")[0],
        UNRELATED: memory_create(owner=owner, content=UNRELATED, project=project)[0],
        THEIRS: memory_create(owner=other_user, content=THEIRS, project=other_project, is_global=True)[0],
        FORGOTTEN: memory_create(owner=owner, content=FORGOTTEN, project=project)[0],
    }
    memory_delete(owner=owner, memory_id=made[FORGOTTEN].pk)
    return {content: memory.pk for content, memory in made.items()}


def test_the_coder_is_given_the_projects_and_global_memories_and_its_own(fake_llm, project, owner, lessons) -> None:
    run = run_task(fake_llm, orders_task(project), owner)
    prompts = systems(fake_llm)

    coder_first, coder_second = prompts["coder"]
    assert MEMORIES_HEADING in coder_first
    for lesson in (SNAKE_CASE, ISO_DATES, CURSOR_PAGINATION):
        assert f"- {lesson}" in coder_first
    # Recalled once per phase: every turn has the same (cached) system prompt.
    assert coder_second == coder_first
    # Scoped to the Coder: not the Planner's or the Reviewer's.
    for agent in ("planner", "reviewer"):
        (system,) = prompts[agent]
        assert SNAKE_CASE in system and ISO_DATES in system
        assert CURSOR_PAGINATION not in system
    for system in [*prompts["planner"], *prompts["coder"], *prompts["reviewer"]]:
        assert UNRELATED not in system  # under the minimum score
        assert THEIRS not in system  # another user's, though global
        assert FORGOTTEN not in system  # deleted
        assert NOTES_HEADING not in system  # no agent has notes

    # Each call records what it was given.
    calls = list(AgentCall.objects.filter(run=run))
    assert [call.agent for call in calls] == ["planner", "coder", "coder", "reviewer"]
    by_agent = {call.agent: call.recalled for call in calls}
    coder_ids = [memory["id"] for memory in by_agent["coder"]["memories"]]
    assert set(coder_ids) == {lessons[SNAKE_CASE], lessons[ISO_DATES], lessons[CURSOR_PAGINATION]}
    assert {memory["id"] for memory in by_agent["planner"]["memories"]} == {lessons[SNAKE_CASE], lessons[ISO_DATES]}
    scores = [memory["score"] for memory in by_agent["coder"]["memories"]]
    assert scores == sorted(scores, reverse=True) and all(score >= 0.1 for score in scores)
    assert by_agent["coder"]["notes"] is None
    snake = next(m for m in by_agent["coder"]["memories"] if m["id"] == lessons[SNAKE_CASE])
    assert snake["content"] == SNAKE_CASE

    # And the lineage's input items carry it: the Planner's call and the Coder's conversation.
    inputs = {
        item.agent_id: context_decode(item)
        for item in ContextItem.objects.filter(run_id=run.pk, metadata__role="input")
    }
    assert {m["id"] for m in inputs["coder"]["recalled"]["memories"]} == set(coder_ids)
    assert {m["id"] for m in inputs["planner"]["recalled"]["memories"]} == {lessons[SNAKE_CASE], lessons[ISO_DATES]}


def test_a_project_memory_stays_in_its_project_a_global_one_does_not(fake_llm, project, owner, lessons) -> None:
    elsewhere = ProjectFactory(owner=owner)
    run = run_task(fake_llm, orders_task(elsewhere), owner)

    for system in systems(fake_llm)["coder"]:
        assert ISO_DATES in system
        assert SNAKE_CASE not in system
        assert CURSOR_PAGINATION not in system  # the Coder's, but in the other project
    recalled = AgentCall.objects.filter(run=run, agent="coder").first()
    assert recalled is not None
    assert [memory["id"] for memory in recalled.recalled["memories"]] == [lessons[ISO_DATES]]


def test_the_agents_notes_reach_its_prompt_capped_to_the_newest(fake_llm, project, owner, settings) -> None:
    settings.AGENT_NOTES_PROMPT_MAX_CHARS = 4000
    AgentNote.objects.create(owner=owner, agent_id="coder", content="OLDEST-NOTE " + "x" * 5000 + " NEWEST-NOTE")
    run = run_task(fake_llm, orders_task(project), owner)
    prompts = systems(fake_llm)

    for system in prompts["coder"]:
        assert f"{NOTES_HEADING}\n{GLOBAL_NOTES_HEADING}\n{NOTES_CUT}" in system
        assert "NEWEST-NOTE" in system
        assert "OLDEST-NOTE" not in system
    for agent in ("planner", "reviewer"):
        assert NOTES_HEADING not in prompts[agent][0]
    for call in AgentCall.objects.filter(run=run):
        expected = (
            {"agent_id": "coder", "chars": 4000, "cut": True, "given": ["global"], "project_id": project.pk}
            if call.agent == "coder"
            else None
        )
        assert call.recalled["notes"] == expected


def test_the_run_panel_and_the_api_show_what_each_agent_recalled(
    fake_llm, project, owner, lessons, owner_client, other_client
) -> None:
    AgentNote.objects.create(owner=owner, agent_id="reviewer", content="Check the tests first.")
    task = orders_task(project)
    run = run_task(fake_llm, task, owner)

    api = owner_client.get(f"/api/runs/{run.pk}").json()["recalled"]
    assert [entry["agent"] for entry in api] == ["planner", "coder", "reviewer"]
    coder = api[1]
    assert coder["calls"] == 2
    assert {m["id"] for m in coder["memories"]} == {lessons[SNAKE_CASE], lessons[ISO_DATES], lessons[CURSOR_PAGINATION]}
    assert all(m["calls"] == 2 and m["content"] and m["score"] > 0 for m in coder["memories"])
    assert api[2]["notes"] == {
        "agent_id": "reviewer",
        "chars": len("Check the tests first."),
        "cut": False,
        "given": ["global"],
        "project_id": project.pk,
    }
    listed = owner_client.get(f"/api/tasks/{task.pk}/runs").json()["results"][0]["recalled"]
    assert listed == api
    assert other_client.get(f"/api/runs/{run.pk}").status_code == 404

    owner_client.force_login(owner)
    page = owner_client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    start = page.index('data-testid="run-recalled"')
    section = page[start : page.index("</section>", start)]
    assert CURSOR_PAGINATION in section and SNAKE_CASE in section
    assert f'href="{reverse("memory:recall")}?q={quote(SNAKE_CASE)}"' in section
    assert f'href="{reverse("memory:notes-agent", args=["reviewer"])}"' in section
    assert THEIRS not in section and FORGOTTEN not in section
    assert "<script" not in section


def test_a_failing_recall_does_not_stop_the_run(fake_llm, project, owner, monkeypatch) -> None:
    from pipelines.agents import recall

    def broken(**kwargs):
        raise RuntimeError("the embedder is gone")

    monkeypatch.setattr(recall, "memory_recall", broken)
    fake_llm.script(ToolReply(input=PLAN), *coder_creates("app/x.py", "x = 1\n"), ToolReply(input=PASS))
    run = drive_in_process(run_start(task=TaskFactory(project=project, title="Add x"), user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert all(call.recalled["memories"] == [] for call in AgentCall.objects.filter(run=run))


def test_each_recall_is_recorded_as_a_use_of_the_memory(fake_llm, project, owner, lessons) -> None:
    from memory.models import MemoryUse

    run = run_task(fake_llm, orders_task(project), owner)
    uses = MemoryUse.objects.filter(memory_id=lessons[SNAKE_CASE], run_id=run.pk)
    assert sorted(uses.values_list("agent", flat=True)) == ["coder", "planner", "reviewer"]
    assert not MemoryUse.objects.filter(memory_id=lessons[UNRELATED]).exists()
    assert not MemoryUse.objects.filter(memory_id=lessons[CURSOR_PAGINATION], agent="planner").exists()
