"""The agents write memories themselves (pipelines/agents/memories.py): a ``[MEMORY: …]``
marker in the Coder's text, the Planner's subtasks or the Reviewer's findings, or the
Coder's ``remember`` tool, is a memory of the project scoped to that agent, taken out of
what is stored and shown, and confirmed in the agent's live log. Real git repositories in
tmp_path; the fake Anthropic server scripts each turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.models import ContextItem, Memory
from memory.models.semantic import MemorySource
from memory.services.context import context_decode
from pipelines.agent_log import AgentLogStream
from pipelines.agents import memories as agent_memories
from pipelines.agents.coder import LESSON_KEPT, LESSON_MISSING
from pipelines.learning.lessons import LESSON_MEMORY_TYPE
from pipelines.models import AgentCall, PipelineRun, RunStatus
from pipelines.runs.services import run_start
from pipelines.tests.repositories import committed_repository, git, log_text
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import EDITOR, TextReply, ToolReply, coder_creates
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Add x", "description": "x = 1 in app/x.py", "order": 1}]}
PASS = {"pass": True, "findings": []}
LESSON = "run migrations with --check before committing"


@pytest.fixture
def repo_root(tmp_path: Path) -> Path:
    return committed_repository(tmp_path / "repos" / "app", {"app/__init__.py": ""})


@pytest.fixture
def task(project, linked) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def coder_output(run: PipelineRun) -> dict:
    (changes,) = ContextItem.objects.filter(run=run, type="changes")
    return context_decode(changes)["output"]


def test_a_marker_in_the_coders_summary_is_a_memory_and_is_in_no_summary(
    fake_llm, task, owner, repo_root: Path
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        *coder_creates("app/x.py", "x = 1\n", summary=f"Added x.\n[MEMORY: {LESSON}]"),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    memory = Memory.objects.get()
    assert memory.content == LESSON
    assert (memory.owner, memory.project, memory.agent) == (owner, task.project, "coder")
    assert (memory.source, memory.source_run_id, memory.memory_type) == (MemorySource.AGENT, run.pk, LESSON_MEMORY_TYPE)
    assert "coder" in memory.source_note and f"#{task.pk}" in memory.source_note
    # Neither the commit message nor the lineage keep the marker.
    message = git(repo_root, "log", "-1", "--format=%B", run.branch)
    assert message.endswith("Added x.") and "MEMORY" not in message and LESSON not in message
    assert coder_output(run)["summary"] == "Added x."
    # The live log streamed the reply as it came, and confirms the memory after it.
    assert f"[Remembered for the coder: {LESSON}]" in log_text(run, "coder")
    # The run lists it among what it taught.
    run.refresh_from_db()
    assert [(entry["kind"], entry["memories"][0]["id"]) for entry in run.lessons] == [("agent", memory.pk)]


def test_markers_in_the_planners_subtasks_and_the_reviewers_findings_and_text(fake_llm, task, owner) -> None:
    plan = {
        "subtasks": [{"id": "s1", "title": "Add x", "description": "x = 1 [MEMORY: app/ holds the code]", "order": 1}]
    }
    finding = {"file": "app/x.py", "line": 1, "severity": "info", "message": "Fine. [MEMORY: name constants in caps]"}
    fake_llm.script(
        ToolReply(input=plan),
        *coder_creates("app/x.py", "x = 1\n"),
        ToolReply(text="Reading it. [MEMORY: tests live in tests/]\n", input={"pass": True, "findings": [finding]}),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert sorted(Memory.objects.values_list("agent", "content")) == [
        ("planner", "app/ holds the code"),
        ("reviewer", "name constants in caps"),
        ("reviewer", "tests live in tests/"),
    ]
    assert all(m.source == MemorySource.AGENT and m.source_run_id == run.pk for m in Memory.objects.all())
    # The plan and the findings are stored and shown without their markers.
    assert run.plan[0]["description"] == "x = 1"
    task.refresh_from_db()
    assert task.subtasks[0]["description"] == "x = 1"
    assert run.review_findings[0]["message"] == "Fine."
    assert run.review_history[-1]["findings"][0]["message"] == "Fine."
    review = AgentCall.objects.get(run=run, agent="reviewer")
    assert review.tool_input["findings"][0]["message"] == "Fine."
    (review_item,) = ContextItem.objects.filter(run=run, type="review")
    assert context_decode(review_item)["output"]["findings"][0]["message"] == "Fine."
    assert "[Remembered for the planner: app/ holds the code]" in log_text(run, "planner")
    reviewer_log = log_text(run, "reviewer")
    assert "[Remembered for the reviewer: tests live in tests/]" in reviewer_log
    assert "[Remembered for the reviewer: name constants in caps]" in reviewer_log


def test_the_remember_tool_stores_a_lesson_once_and_refuses_a_placeholder(fake_llm, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="remember", input={"lesson": "Use  pathlib,\nnot os.path."}),
        ToolReply(name="remember", input={"lesson": "lesson"}),
        # Said again as a marker in the same phase: still one memory, not reinforced.
        *coder_creates("app/x.py", "x = 1\n", summary="Added x. [MEMORY: Use pathlib, not os.path.]"),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    memory = Memory.objects.get()
    assert (memory.content, memory.agent, memory.source) == ("Use pathlib, not os.path.", "coder", MemorySource.AGENT)
    assert memory.reinforce_count == 0
    coder_requests = [request for request in fake_llm.requests if EDITOR in request.tool_names]
    assert "remember" in coder_requests[0].tool_names
    kept, refused = (request.tool_results[-1] for request in coder_requests[1:3])
    assert kept["content"] == LESSON_KEPT and "is_error" not in kept
    assert refused["content"] == LESSON_MISSING and refused["is_error"] is True
    assert coder_output(run)["summary"] == "Added x."
    coder_log = log_text(run, "coder")
    assert coder_log.count("[Remembered for the coder: Use pathlib, not os.path.]") == 1


def test_a_placeholder_marker_stores_nothing_and_is_still_stripped(fake_llm, task, owner, repo_root: Path) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        *coder_creates("app/x.py", "x = 1\n", summary="Added x. [MEMORY: lesson]"),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert not Memory.objects.exists()
    assert coder_output(run)["summary"] == "Added x."
    assert "MEMORY" not in git(repo_root, "log", "-1", "--format=%B", run.branch)
    assert "[Remembered" not in log_text(run, "coder")


def test_a_memory_that_cannot_be_stored_does_not_stop_the_run(fake_llm, task, owner, monkeypatch) -> None:
    def broken(**kwargs):
        raise RuntimeError("the embedding model is gone")

    monkeypatch.setattr(agent_memories, "memory_create", broken)
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="remember", input={"lesson": "Keep it small."}),
        *coder_creates("app/x.py", "x = 1\n", summary=f"Added x. [MEMORY: {LESSON}]"),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert not Memory.objects.exists()
    assert coder_output(run)["summary"] == "Added x."
    coder_requests = [request for request in fake_llm.requests if EDITOR in request.tool_names]
    assert coder_requests[1].tool_results[-1]["is_error"] is True
    coder_log = log_text(run, "coder")
    assert f"[Could not store the coder's memory (the run goes on): {LESSON}]" in coder_log
    assert "[Remembered" not in coder_log


def test_the_coders_text_between_tool_calls_is_remembered_too(fake_llm, task, owner) -> None:
    create = ToolReply(
        name=EDITOR,
        text=f"Creating it. [MEMORY: {LESSON}]\n",
        input={"command": "create", "path": "app/x.py", "file_text": "x = 1\n"},
    )
    fake_llm.script(ToolReply(input=PLAN), create, TextReply("Added x."), ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert list(Memory.objects.values_list("agent", "content")) == [("coder", LESSON)]


def test_a_replayed_reply_is_stripped_but_its_lessons_are_not_stored_again(task) -> None:
    run = PipelineRun.objects.create(task=task, number=1, status=RunStatus.REVIEWING, phase=RunStatus.REVIEWING)
    memories = agent_memories.PhaseMemories(run, "reviewer", AgentLogStream(task=task, run=run, agent="reviewer"))
    answer = {"pass": True, "findings": [{"line": 3, "message": "Fine. [MEMORY: keep it small]"}]}

    # Bought by a worker that died: stored back then, so only stripped now.
    replayed = memories.take_answer(answer, reused=True)
    assert replayed == {"pass": True, "findings": [{"line": 3, "message": "Fine."}]}
    assert memories.take_text("Again: [MEMORY: keep it small]") == "Again:"
    assert not Memory.objects.exists() and memories.written == []
    # A new lesson of the same phase is stored.
    assert memories.take_text("[MEMORY: tests first]") == ""
    assert [write.memory.content for write in memories.written] == ["tests first"]
