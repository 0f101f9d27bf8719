"""Runs on a linked git repository: the agents read the code through their tools, each
run works on its own branch in its own worktree, the project's tests verify the change,
and approval merges it — or says why it did not, keeping the branch.

Real git repositories in tmp_path; the LLM is the fake Anthropic server, scripted.
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus
from pipelines.phases.driver import run_advance
from pipelines.review.selectors import run_diff, run_patch
from pipelines.review.services import BaseMoved, run_approve
from pipelines.runs.services import run_discard_branch, run_retry, run_start
from pipelines.runs.workspace import runs_cleanup_worktrees
from pipelines.tests.repositories import CALC, CALC_FILES, CALC_FIXED, git, git_commit, log_text
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}


@pytest.fixture
def repo_files() -> dict[str, str | bytes]:
    return {**CALC_FILES, "README.md": "# Calc\n"}


def edit(**tool_input: object) -> ToolReply:
    """One text editor call of the Coder."""
    return ToolReply(name=EDITOR, input=dict(tool_input))


VIEW_CALC = edit(command="view", path="app/calc.py")
FIX_CALC = edit(command="str_replace", path="app/calc.py", old_str="return a - b", new_str="return a + b")
DONE = TextReply("Fixed add: it subtracted.")


def test_the_coder_reads_then_edits_and_the_change_lands_on_the_runs_branch(
    fake_llm, linked, repo_root, task, owner
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name=EDITOR, input={"command": "view", "path": "app/calc.py"}, text="Reading calc first. "),
        FIX_CALC,
        edit(command="create", path="app/util.py", file_text="TWO = 2\n"),
        ToolReply(name="delete_file", input={"path": "README.md"}),
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.branch == f"autocoder/task-{task.pk}-run-1"
    # The Planner saw the file tree; the Coder's second turn carried the file it viewed.
    planner_request, coder_first, coder_second, *_, coder_last, reviewer_request = fake_llm.requests
    assert "app/calc.py" in planner_request.prompt_text
    assert coder_first.forced_tool is None and EDITOR in coder_first.tool_names
    assert "run_tests" in coder_first.tool_names and "submit_changes" not in coder_first.tool_names
    assert "str_replace" in coder_first.system_text and "Fix add" in coder_first.prompt_text
    results = coder_second.tool_results
    assert len(results) == 1 and "return a - b" in json.dumps(results[0]["content"])
    assert len(coder_last.tool_results) == 4 and not any(r.get("is_error") for r in coder_last.tool_results)
    assert "return a + b" in reviewer_request.prompt_text  # the real diff
    # Every turn is a costed call; the tool calls show in the live log.
    assert AgentCall.objects.filter(run=run, agent="coder").count() == 5
    assert f"→ {EDITOR}" in log_text(run, "coder") and "→ delete_file" in log_text(run, "coder")
    assert {(change["file_path"], change["action"]) for change in run.file_changes} == {
        ("app/calc.py", "modify"),
        ("app/util.py", "create"),
        ("README.md", "delete"),
    }

    # The branch holds one commit named after the task; the base branch is untouched.
    assert git(repo_root, "log", "--format=%s", "-1", run.branch).startswith("Make add add")
    assert git(repo_root, "show", "main:app/calc.py") + "\n" == CALC
    assert git(repo_root, "rev-parse", "main") == run.base_commit
    diff = run_diff(run=run)
    assert {(f.path, f.action) for f in diff.files} == {
        ("app/calc.py", "modify"),
        ("app/util.py", "create"),
        ("README.md", "delete"),
    }
    assert diff.stats["lines_added"] == 2 and diff.stats["lines_removed"] == 2

    # Approval merges into main: the change is there, in the user's checkout too.
    approved = run_approve(run=run, actor=owner)
    assert approved.status == RunStatus.APPROVED
    assert approved.merge_result["merged"] is True
    assert git(repo_root, "show", "main:app/calc.py") + "\n" == CALC_FIXED
    assert (repo_root / "app" / "calc.py").read_text() == CALC_FIXED
    assert not (repo_root / "README.md").exists()
    task.refresh_from_db()
    assert task.status == "done"


def test_a_conflicting_base_goes_to_the_coder_and_leaves_main_alone(fake_llm, linked, repo_root, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    first_head = run.head_commit
    # Meanwhile someone changes the same line on main.
    (repo_root / "app" / "calc.py").write_text("def add(a, b):\n    return b + a  # theirs\n")
    git_commit(repo_root, "Theirs", "-a")
    main_before = git(repo_root, "rev-parse", "main")

    # Nothing is approved: the base is merged into the branch (pipelines/tests/pull_requests/
    # test_base_moved.py follows the Coder's round that resolves it).
    with pytest.raises(BaseMoved) as moved:
        run_approve(run=run, actor=owner)

    assert moved.value.extra["conflicts"] == ["app/calc.py"]
    run.refresh_from_db()
    assert run.status == RunStatus.CODING
    assert git(repo_root, "rev-parse", "main") == main_before
    assert git(repo_root, "status", "--porcelain") == ""
    # The branch keeps its work: the merge with the markers sits on top of it.
    assert git(repo_root, "rev-parse", "--verify", run.branch) == run.head_commit
    git(repo_root, "merge-base", "--is-ancestor", first_head, run.head_commit)


def test_edits_that_do_not_fit_the_files_go_back_to_the_coder_as_errors(
    fake_llm, linked, repo_root, task, owner
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        # create of a file that exists, and an edit of one that does not: both refused.
        edit(command="create", path="app/calc.py", file_text=CALC_FIXED),
        edit(command="str_replace", path="app/nope.py", old_str="x", new_str="y"),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    coder_requests = [r for r in fake_llm.requests if EDITOR in r.tool_names]
    refused = [coder_requests[1].tool_results[-1], coder_requests[2].tool_results[-1]]
    assert all(result["is_error"] is True for result in refused)
    assert [call.agent for call in AgentCall.objects.filter(run=run)] == [
        "planner", "coder", "coder", "coder", "coder", "reviewer",
    ]  # fmt: skip
    assert "return a + b" in git(repo_root, "show", f"{run.branch}:app/calc.py")
    assert "app/nope.py" not in git(repo_root, "ls-tree", "-r", "--name-only", run.branch)
    assert git(repo_root, "rev-list", "--count", f"main..{run.branch}") == "1"


@needs_bwrap
def test_the_verify_step_catches_a_failing_test_and_the_fix_loop_fixes_it(
    fake_llm, linked, repo_root, task, owner
) -> None:
    linked.test_command = "python3 check.py"
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        # First attempt: a change that leaves the bug in.
        edit(command="create", path="app/util.py", file_text="X = 1\n"),
        DONE,
        ToolReply(input=PASS),  # the Reviewer misses it, the tests do not
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    statuses = list(run.transitions.values_list("to_status", flat=True))
    assert statuses == [
        "queued", "planning", "preparing", "coding", "verifying", "reviewing", "fixing", "verifying", "reviewing",
        "awaiting_approval",
    ]  # fmt: skip
    failed_review = run.review_history[0]
    assert failed_review["pass"] is False
    assert any("add(2, 3) is -1" in finding["message"] for finding in failed_review["findings"])
    # The Reviewer was told what the tests said; the Coder got the findings to fix.
    _, _, _, reviewer_first, coder_fixing, _, _ = fake_llm.requests
    assert "add(2, 3) is -1" in reviewer_first.prompt_text
    assert "add(2, 3) is -1" in coder_fixing.prompt_text
    assert run.verify_result["passed"] is True
    verifier_log = log_text(run, "verifier")
    assert "AssertionError" in verifier_log and "ok" in verifier_log
    # The Reviewer's "pass" is in its log: the log says why the review failed all the same.
    assert "[The review fails all the same: the tests failed" in log_text(run, "reviewer")


@needs_bwrap
def test_a_hanging_test_command_is_killed_at_its_timeout(fake_llm, linked, task, owner, settings) -> None:
    settings.VERIFY_TIMEOUT_SECONDS = 1
    linked.test_command = "sleep 60"
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = run_start(task=task, user=owner)
    for _ in range(5):  # queued → planning → preparing (the base's tests time out too) → coding → verifying
        run_advance(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == RunStatus.FIXING
    assert run.verify_result["timed_out"] is True and run.verify_result["passed"] is False
    assert run.review_findings and "time" in json.dumps(run.review_findings).lower()


@needs_bwrap
def test_the_test_command_cannot_read_the_servers_secrets(fake_llm, linked, task, owner, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-server-secret")
    monkeypatch.setenv("SECRET_KEY_CANARY", "server-secret-canary")
    linked.test_command = "env"
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    output = run.verify_result["output"] + log_text(run, "verifier")
    assert "PATH=" in output  # the command did run and print its environment
    for secret in ("sk-ant-server-secret", "server-secret-canary", "DJANGO_SETTINGS_MODULE", "DATABASE_URL"):
        assert secret not in output


@needs_bwrap
def test_without_a_sandbox_the_tests_do_not_run_and_the_run_pauses_saying_why(
    fake_llm, linked, repo_root, task, owner, settings
) -> None:
    settings.SANDBOX_BWRAP = str(repo_root / "no-bwrap-here")
    sandbox_status(refresh=True)
    linked.test_command = "touch ran.txt && python3 check.py"
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    # git runs in the sandbox too: the run pauses before its worktree is made, having
    # bought nothing.
    assert run.status == RunStatus.PAUSED and run.verify_result is None and not run.worktree_path
    assert "sandbox for git and test commands cannot be made" in run.error and "bubblewrap" in run.error
    assert fake_llm.pending == 4
    # The operator installs bubblewrap; Retry runs the tests, sandboxed.
    settings.SANDBOX_BWRAP = "bwrap"
    sandbox_status(refresh=True)
    run = drive_in_process(run_retry(run=run, actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.verify_result["passed"] is True and run.verify_result["sandboxed"] is True
    assert (Path(run.worktree_path) / "ran.txt").exists()  # in the sandbox, once it could be made


def test_the_coder_stops_at_its_turn_limit_commits_and_is_told_to_finish(
    fake_llm, linked, repo_root, task, owner, settings
) -> None:
    settings.CODER_MAX_TURNS = 2
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="search_code", input={"pattern": "def add"}),
        edit(command="create", path="app/util.py", file_text="X = 1\n"),
        # Out of turns: committed, and the Reviewer still reviews what was done.
        ToolReply(input={"pass": True, "findings": []}),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    first_review = run.review_history[0]
    # The Reviewer passed it, but the Coder's own finding fails the review: a fix round.
    assert first_review["pass"] is False
    [finding] = first_review["findings"]
    assert "ran out of turns" in finding["message"]
    assert [call.agent for call in AgentCall.objects.filter(run=run)] == [
        "planner", "coder", "coder", "reviewer", "coder", "coder", "reviewer",
    ]  # fmt: skip
    reviewer = next(r for r in fake_llm.requests if "submit_review" in r.tool_names)
    assert "+X = 1" in reviewer.prompt_text  # the real diff of what was done
    assert git(repo_root, "rev-list", "--count", f"main..{run.branch}") == "2"
    first_commit = git(repo_root, "rev-list", "--reverse", f"main..{run.branch}").splitlines()[0]
    assert git(repo_root, "show", f"{first_commit}:app/util.py") == "X = 1"
    coder_fixing = [r for r in fake_llm.requests if EDITOR in r.tool_names][2]
    assert "ran out of turns" in coder_fixing.prompt_text and "+X = 1" in coder_fixing.prompt_text
    assert run.coder_findings == [] and run.review_history[1]["findings"] == []


def test_tools_refuse_paths_outside_the_worktree(fake_llm, linked, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        edit(command="view", path="../../../../etc/passwd"),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    result = fake_llm.requests[2].tool_results[0]
    assert result["is_error"] is True
    assert "root:" not in json.dumps(result)


def test_finished_runs_lose_their_worktree_after_retention_but_keep_the_branch(
    fake_llm, linked, repo_root, task, owner
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    from pipelines.runs.services import run_cancel

    run_cancel(run=run, actor=owner)
    worktree = Path(run.worktree_path)
    assert worktree.is_dir()
    assert runs_cleanup_worktrees() == 0  # not old enough yet

    PipelineRun.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(days=30))
    assert runs_cleanup_worktrees() == 1
    assert not worktree.exists()
    assert git(repo_root, "rev-parse", "--verify", run.branch)  # the unmerged work stays
    run.refresh_from_db()
    assert run.worktree_removed_at is not None
    assert "return a + b" in run_patch(run=run)

    # Discarding is the person's call, and only then does the branch go.
    run_discard_branch(run=run, actor=owner)
    assert run.branch not in git(repo_root, "branch", "--list", run.branch)
    assert run_patch(run=run) == ""


def test_approve_over_the_api_with_a_conflicting_base_is_409_base_moved_with_the_conflicts(
    fake_llm, linked, repo_root, task, owner, owner_client
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    patch = owner_client.get(f"/api/runs/{run.pk}/patch")
    assert patch.status_code == 200 and patch["Content-Type"].startswith("text/x-patch")
    assert b"return a + b" in patch.content
    (repo_root / "app" / "calc.py").write_text("def add(a, b):\n    return sum((a, b))\n")
    git_commit(repo_root, "Theirs", "-a")

    response = owner_client.post(f"/api/runs/{run.pk}/approve")
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "base_moved"
    assert body["extra"]["conflicts"] == ["app/calc.py"]

    detail = owner_client.get(f"/api/runs/{run.pk}").json()
    assert detail["status"] == "coding"
    run.refresh_from_db()
    assert run.feedback_origin == "base" and run.base_updates[-1]["conflicts"] == ["app/calc.py"]


def test_another_users_patch_is_404(fake_llm, linked, task, owner, other_client) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert other_client.get(f"/api/runs/{run.pk}/patch").status_code == 404
    assert other_client.post(f"/api/runs/{run.pk}/discard-branch").status_code == 404


def test_the_coder_stops_at_its_token_limit(fake_llm, linked, repo_root, task, owner, settings) -> None:
    settings.CODER_TOKEN_LIMIT = 1000
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(
            name=EDITOR,
            input={"command": "create", "path": "app/util.py", "file_text": "X = 1\n"},
            input_tokens=1500,
            output_tokens=20,
        ),
        ToolReply(input=PASS),  # the Reviewer of what was done
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert "ran out of tokens" in run.review_history[0]["findings"][0]["message"]
    # Every turn is paid for and counted.
    coder_calls = AgentCall.objects.filter(run=run, agent="coder")
    assert coder_calls.count() == 3 and coder_calls.first().input_tokens == 1500
    assert git(repo_root, "show", f"{run.branch}:app/util.py") == "X = 1"


def test_an_old_str_must_match_exactly_once(fake_llm, linked, repo_root, task, owner) -> None:
    (repo_root / "app" / "calc.py").write_text(CALC + "\n\ndef sub(a, b):\n    return a - b\n")
    git_commit(repo_root, "sub", "-a")
    fake_llm.script(
        ToolReply(input=PLAN),
        edit(command="str_replace", path="app/calc.py", old_str="return a-b", new_str="return a + b"),
        edit(command="str_replace", path="app/calc.py", old_str="return a - b", new_str="return a + b"),
        edit(
            command="str_replace",
            path="app/calc.py",
            old_str="def add(a, b):\n    return a - b",
            new_str="def add(a, b):\n    return a + b",
        ),
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    coder_requests = [r for r in fake_llm.requests if EDITOR in r.tool_names]
    results = [request.tool_results[-1] for request in coder_requests[1:]]
    assert [result.get("is_error", False) for result in results] == [True, True, False]
    assert [result["tool_use_id"] for result in results] == [
        block["id"]
        for request in coder_requests[1:]
        for block in request.messages[-2]["content"]
        if block["type"] == "tool_use"
    ]
    assert git(repo_root, "show", f"{run.branch}:app/calc.py").count("return a + b") == 1
    assert "return a - b" in git(repo_root, "show", f"{run.branch}:app/calc.py")


def test_in_a_fix_round_the_coder_edits_what_it_wrote_with_the_findings_in_its_prompt(
    fake_llm, linked, repo_root, task, owner
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        edit(command="create", path="app/util.py", file_text="X = 1\n"),
        DONE,
        ToolReply(input={"pass": False, "findings": [{"file": "app/util.py", "severity": "major", "message": "X=2"}]}),
        # Its prompt carries the branch's diff and the finding: it edits what it wrote.
        edit(command="str_replace", path="app/util.py", old_str="X = 1", new_str="X = 2"),
        DONE,
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert git(repo_root, "show", f"{run.branch}:app/util.py") == "X = 2"
    assert not run.change_problems
    coder_fixing = [r for r in fake_llm.requests if EDITOR in r.tool_names][2]
    assert "X=2" in coder_fixing.prompt_text and "+X = 1" in coder_fixing.prompt_text
    assert git(repo_root, "rev-list", "--count", f"main..{run.branch}") == "2"


FLOOD_BYTES = 20_000_000
# A test command printing ~20 MB, then the line a person would look for.
FLOOD = f"yes 'a line of a very chatty test suite' | head -c {FLOOD_BYTES}; echo THE END"


@needs_bwrap
def test_a_test_command_printing_megabytes_streams_and_stores_only_up_to_the_cap(
    fake_llm, linked, task, owner, owner_client, settings
) -> None:
    from pipelines.tests.test_api import read_stream

    cap = settings.VERIFY_STREAM_MAX_CHARS = 50_000
    settings.VERIFY_OUTPUT_MAX_CHARS = 20_000
    linked.test_command = FLOOD
    linked.save()
    # The Coder runs the tests once with its tool, then the verify step runs them.
    fake_llm.script(ToolReply(input=PLAN), FIX_CALC, ToolReply(name="run_tests", input={}), DONE, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL

    # Two commands ran: each streamed (and stored) at most the cap, and said so once.
    for agent in ("coder", "verifier"):
        log = log_text(run, agent)
        assert log.count("the rest is not streamed") == 1, agent
        assert cap <= len(log) < cap + 2000, (agent, len(log))  # the command's and the agent's own lines
    stored = sum(len(json.dumps(event.data)) for event in RunEvent.objects.filter(task=task))
    assert stored < 2 * cap + 100_000, stored  # the run's own events are a few KB
    events = read_stream(owner_client.get(f"/api/tasks/{task.pk}/events?follow=false", HTTP_ACCEPT="text/event-stream"))
    assert len(events) < 2 * cap + 150_000, len(events)
    # The result still keeps the end of the output, where failures are.
    output = run.verify_result["output"]
    assert output.endswith("THE END\n") and "earlier characters of output dropped" in output
    assert len(output) <= settings.VERIFY_OUTPUT_MAX_CHARS + 100


RUN_SECRET = "tok-run-41d9c2e7b8"


@needs_bwrap
def test_a_secret_the_test_command_prints_is_stored_nowhere_and_sent_to_no_model(fake_llm, linked, task, owner) -> None:
    """The project's secret reaches the test command (the verify step and the Coder's
    run_tests), which prints it and fails once: no event, verify result, finding,
    agent call, lineage or daily log row, and no request to the model, holds it."""
    from django.core.management import call_command

    from repos.variables import project_variable_set

    project_variable_set(project=task.project, name="API_TOKEN", value=RUN_SECRET, secret=True)
    # The command checks the value by its digest: the command itself is no secret (it
    # is shown on the Repository page and in the log).
    digest = hashlib.sha256(RUN_SECRET.encode()).hexdigest()
    linked.test_command = (
        'echo "token=$API_TOKEN"; '
        f'test "$(printf %s "$API_TOKEN" | sha256sum | cut -d" " -f1)" = {digest} && echo token-received; '
        "python3 check.py"
    )
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="run_tests", input={}),  # the Coder's own run: the bug is still there
        edit(command="create", path="app/util.py", file_text="X = 1\n"),
        DONE,
        ToolReply(input=PASS),  # verify failed: the Reviewer gets its output as a finding
        FIX_CALC,
        DONE,
        ToolReply(input=PASS),
    )

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert "token-received" in log_text(run, "verifier") and "token-received" in log_text(run, "coder")
    assert "token=••••••" in log_text(run, "verifier")
    first_review = run.review_history[0]
    assert any("token=••••••" in finding["message"] for finding in first_review["findings"])
    sent = json.dumps([request.body for request in fake_llm.requests], ensure_ascii=False)
    assert "token=••••••" in sent  # the Coder's tool result and the Reviewer's prompt had the output…
    assert RUN_SECRET not in sent  # …masked
    assert RUN_SECRET not in json.dumps(run.verify_result) + json.dumps(run.review_history)
    events = json.dumps(list(RunEvent.objects.filter(run=run).values_list("data", flat=True)))
    assert RUN_SECRET not in events
    calls = AgentCall.objects.filter(run=run).values("prompt", "response_text", "tool_input", "response")
    assert RUN_SECRET not in json.dumps(list(calls), default=str)
    # Everything the database holds (lineage, daily log, transitions…): only the
    # variable's ciphertext, never the value.
    out = io.StringIO()
    call_command("dumpdata", stdout=out)
    assert RUN_SECRET not in out.getvalue()


def test_a_run_that_changed_nothing_says_so_and_approving_it_merges_nothing(
    fake_llm, linked, repo_root, task, owner, client
) -> None:
    from django.urls import reverse

    fake_llm.script(
        ToolReply(input=PLAN), VIEW_CALC, TextReply("Nothing to change: add already adds."), ToolReply(input=PASS)
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL and run.head_commit == run.base_commit
    base_before = git(repo_root, "rev-parse", "main")
    client.force_login(owner)
    page = client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert 'data-testid="changed-nothing"' in page and "Read the diff below" not in page

    response = client.post(reverse("pipelines:approve", args=[run.pk]), follow=True)
    text = response.content.decode()
    assert "The run changed nothing, so nothing was merged into main." in text
    assert "Nothing was merged: the run's branch adds nothing to main." in text
    assert "Merged into" not in text  # an earlier merge commit named as this run's
    assert git(repo_root, "rev-parse", "main") == base_before


def test_the_live_log_shows_each_tool_call_once_and_more_than_the_first_line_of_its_result(
    fake_llm, linked, repo_root, task, owner
) -> None:
    fake_llm.script(ToolReply(input=PLAN), VIEW_CALC, FIX_CALC, DONE, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    log = log_text(run, "coder")
    # Once, as the → line: the raw input was streamed into the log before it.
    assert log.count('"old_str"') == 1
    # The edit's result shows the changed region, not only its first line.
    edited = log.split('"old_str"', 1)[1]
    assert "return a + b" in edited.split("→", 1)[0]
    # The Planner's answer still streams: it is what the Planner is writing.
    assert "Fix add" in log_text(run, "planner")
