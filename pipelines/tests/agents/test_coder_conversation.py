"""The Coder editing a linked repository's worktree in a tool conversation
(pipelines/agents/coder.py): a small edit in a big file is a small diff, run_tests in the
loop, a reply cut off at the output limit is continued, cancelling mid-loop commits
nothing. Real git repositories in tmp_path; the fake Anthropic server scripts each turn.
"""

from __future__ import annotations

import json
import re

import pytest

from core.tests.test_sandbox import needs_bwrap
from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus
from pipelines.phases.driver import run_advance
from pipelines.review.selectors import run_diff
from pipelines.runs.services import run_cancel, run_start
from pipelines.tests.repositories import CALC_FILES, git, log_text
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}
FIX_CALC = ToolReply(
    name=EDITOR, input={"command": "str_replace", "path": "app/calc.py", "old_str": "a - b", "new_str": "a + b"}
)
DONE = TextReply("Fixed add: it subtracted.")


@pytest.fixture
def repo_files() -> dict[str, str | bytes]:
    return {**CALC_FILES, "app/big.py": "".join(f"VALUE_{n} = {n}\n" for n in range(2000))}


def coder_requests(fake_llm) -> list:
    return [request for request in fake_llm.requests if EDITOR in request.tool_names]


def test_a_one_line_edit_in_a_2000_line_file_is_a_one_hunk_diff(fake_llm, linked, repo_root, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name=EDITOR, input={"command": "view", "path": "app/big.py", "view_range": [1000, 1002]}),
        ToolReply(
            name=EDITOR,
            input={
                "command": "str_replace",
                "path": "app/big.py",
                "old_str": "VALUE_1000 = 1000\n",
                "new_str": "VALUE_1000 = 1001\n",
            },
        ),
        TextReply("Changed VALUE_1000."),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    diff = run_diff(run=run)
    assert [(f.path, f.action) for f in diff.files] == [("app/big.py", "modify")]
    assert diff.stats["lines_added"] == 1 and diff.stats["lines_removed"] == 1
    patch = git(repo_root, "diff", f"main..{run.branch}")
    assert patch.count("\n@@ ") == 1 and "+VALUE_1000 = 1001" in patch
    assert [change["file_path"] for change in run.file_changes] == ["app/big.py"]
    reviewer = fake_llm.requests[-1]
    assert "+VALUE_1000 = 1001" in reviewer.prompt_text and "VALUE_1500" not in reviewer.prompt_text
    assert git(repo_root, "log", "-1", "--format=%B", run.branch).strip().endswith("Changed VALUE_1000.")


@needs_bwrap
def test_run_tests_fails_then_passes_after_an_edit(fake_llm, linked, repo_root, task, owner) -> None:
    linked.test_command = "python3 check.py"
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="run_tests", input={"note": "before"}),
        FIX_CALC,
        ToolReply(name="run_tests", input={}),
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    requests = coder_requests(fake_llm)
    failed, edited, passed = (request.tool_results[-1] for request in requests[1:4])
    assert failed["is_error"] is True and "The tests failed (exit status 1)" in failed["content"]
    assert "add(2, 3) is -1" in failed["content"]
    assert "is_error" not in edited
    assert "is_error" not in passed and "The tests passed (exit status 0)" in passed["content"]
    assert run.verify_result["passed"] is True  # and the verify step after it
    coder_log = log_text(run, "coder")
    assert "→ run_tests" in coder_log and "error: The tests failed" in coder_log
    assert "add(2, 3) is -1" in coder_log  # the test output streams into the Coder's log


def test_a_reply_cut_off_at_the_output_limit_is_continued(fake_llm, linked, repo_root, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        TextReply("I will change calc.py so that add adds and", stop_reason="max_tokens"),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    continued = coder_requests(fake_llm)[1]
    assistant, user = continued.messages[-2:]
    assert assistant["content"][0]["text"].startswith("I will change calc.py")
    assert "cut off at the output limit" in json.dumps(user["content"])
    assert AgentCall.objects.filter(run=run, agent="coder").count() == 3
    assert "a + b" in git(repo_root, "show", f"{run.branch}:app/calc.py")


def test_cancelling_mid_conversation_commits_nothing(fake_llm, linked, repo_root, task, owner, monkeypatch) -> None:
    fake_llm.script(ToolReply(input=PLAN), FIX_CALC)  # the summary is never asked for
    run = run_start(task=task, user=owner)
    run_advance(run_id=run.pk)  # queued → planning → coding
    run.refresh_from_db()
    assert run.status == RunStatus.CODING

    import pipelines.agents.coder as coder_loop

    real_run_tool = coder_loop._run_tool

    def edit_then_cancel(*args, **kwargs):
        block = real_run_tool(*args, **kwargs)
        run_cancel(run=PipelineRun.objects.get(pk=run.pk), actor=owner)
        return block

    monkeypatch.setattr(coder_loop, "_run_tool", edit_then_cancel)
    run_advance(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == RunStatus.CANCELLED
    assert len(coder_requests(fake_llm)) == 1  # stopped before the next turn
    assert git(repo_root, "rev-list", "--count", f"main..{run.branch}") == "0"
    assert run.head_commit == run.base_commit and run.file_changes == []


# --- Which subtask the Coder is on (start_subtask) ------------------------------------

PLAN_2 = {
    "subtasks": [
        {"id": "s1", "title": "Fix add", "description": "add must add", "order": 1},
        {"id": "s2", "title": "Add the test", "description": "pin add down", "order": 2},
    ]
}
WRITE_TEST = ToolReply(
    name=EDITOR, input={"command": "create", "path": "tests/test_calc.py", "file_text": "def test_add(): pass\n"}
)


def start(order: object) -> ToolReply:
    return ToolReply(name="start_subtask", input={"order": order})


def test_start_subtask_moves_the_marker_the_page_and_the_api_show_it(
    fake_llm, linked, repo_root, task, owner, owner_client, owner_session_client, monkeypatch
) -> None:
    fake_llm.script(ToolReply(input=PLAN_2), start(1), FIX_CALC, start(2), WRITE_TEST, DONE, ToolReply(input=PASS))
    import pipelines.agents.coder as coder_loop

    real_run_tool = coder_loop._run_tool
    seen: dict[str, list] = {"current": [], "panel": [], "api": []}

    def look_then_edit(worktree, call, *args, **kwargs):
        # What the person sees at each edit: the row, the task page's panel, the API.
        run = PipelineRun.objects.get(task=task)
        seen["current"].append(run.current_subtask)
        seen["panel"].append(owner_session_client.get(f"/tasks/{task.pk}/pipeline", HTTP_HX_REQUEST="true"))
        seen["api"].append(owner_client.get(f"/api/runs/{run.pk}").json())
        return real_run_tool(worktree, call, *args, **kwargs)

    monkeypatch.setattr(coder_loop, "_run_tool", look_then_edit)
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert seen["current"] == [1, 2]
    assert [body["current_subtask"] for body in seen["api"]] == [1, 2]
    first, second = (response.content.decode() for response in seen["panel"])
    current = re.compile(r'<li class="subtask subtask-current" aria-current="step"[^>]*>.*?</li>', re.DOTALL)
    assert "Fix add" in current.search(first).group(0) and "Coder working" in first
    assert 'class="subtask subtask-upcoming"' in first and "subtask-done" not in first
    assert "Add the test" in current.search(second).group(0)
    assert re.search(r'class="subtask subtask-done".*?Fix add', second, re.DOTALL)
    # The answers the Coder got, and its live log.
    requests = coder_requests(fake_llm)
    assert requests[0].body["tools"][-1]["name"] == "start_subtask"
    assert requests[1].tool_results[-1]["content"] == "Subtask 1 of 2: Fix add. Go on."
    assert requests[3].tool_results[-1]["content"] == "Subtask 2 of 2: Add the test. Go on."
    assert "is_error" not in requests[3].tool_results[-1]
    coder_log = log_text(run, "coder")
    assert "— Subtask 1 of 2: Fix add —" in coder_log and "— Subtask 2 of 2: Add the test —" in coder_log
    changes = RunEvent.objects.filter(run=run, type="subtask-change").order_by("id")
    assert [(e.data["order"], e.data["position"], e.data["count"], e.data["title"]) for e in changes] == [
        (1, 1, 2, "Fix add"),
        (2, 2, 2, "Add the test"),
    ]
    # The coding phase is over: nothing is marked any more.
    assert run.current_subtask is None
    panel = owner_session_client.get(f"/tasks/{task.pk}/pipeline", HTTP_HX_REQUEST="true").content.decode()
    assert "Add the test" in panel and 'aria-current="step" data-testid="current-subtask"' not in panel
    assert owner_client.get(f"/api/runs/{run.pk}").json()["current_subtask"] is None


@pytest.mark.parametrize("order", [7, "1", None, 2**40])
def test_an_unknown_subtask_is_an_error_result_and_moves_nothing(fake_llm, linked, task, owner, order) -> None:
    fake_llm.script(ToolReply(input=PLAN_2), start(order), start(2), FIX_CALC, DONE)
    run = run_start(task=task, user=owner)
    run_advance(run_id=run.pk)  # planning
    run_advance(run_id=run.pk)  # coding
    run.refresh_from_db()

    assert run.status == RunStatus.REVIEWING
    refused, accepted = (request.tool_results[-1] for request in coder_requests(fake_llm)[1:3])
    assert refused["is_error"] is True
    assert refused["content"] == f"The plan has no subtask with order {order!r}; its subtasks' orders are 1, 2."
    assert accepted["content"] == "Subtask 2 of 2: Add the test. Go on." and "is_error" not in accepted
    assert [e.data["order"] for e in RunEvent.objects.filter(run=run, type="subtask-change")] == [2]
    assert "error: The plan has no subtask" in log_text(run, "coder")


@needs_bwrap
def test_out_of_turns_what_was_done_is_tested_and_reviewed_and_the_review_says_so(
    fake_llm, linked, repo_root, task, owner, settings
) -> None:
    linked.test_command = "python3 check.py"
    linked.save()
    settings.CODER_MAX_TURNS = 2
    subtracts = {"file": "app/calc.py", "line": 2, "severity": "major", "message": "add still subtracts"}
    fake_llm.script(
        ToolReply(input=PLAN_2),
        start(1),
        WRITE_TEST,  # the second turn: out of turns before add is fixed
        ToolReply(input={"pass": False, "findings": [subtracts]}),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    path = [t.to_status for t in run.transitions.order_by("id")][4:]  # after queued, planning, preparing, coding
    assert path == ["verifying", "reviewing", "fixing", "verifying", "reviewing", "awaiting_approval"]
    first_review = run.review_history[0]
    messages = [finding["message"] for finding in first_review["findings"]]
    assert first_review["pass"] is False and len(messages) == 3
    assert "ran out of turns (2)" in messages[0]  # the Coder's own finding comes first
    assert messages[1].startswith("The test command failed (exit code 1).") and "add(2, 3) is -1" in messages[1]
    assert messages[2] == "add still subtracts"  # the Reviewer reviewed what was done
    reviewer = next(r for r in fake_llm.requests if "submit_review" in r.tool_names)
    assert "+def test_add(): pass" in reviewer.prompt_text and "The test command failed" in reviewer.prompt_text
    fixing = coder_requests(fake_llm)[2]
    assert "ran out of turns" in fixing.prompt_text and "add still subtracts" in fixing.prompt_text
    assert run.verify_result["passed"] is True and run.coder_findings == []
