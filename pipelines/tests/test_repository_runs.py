"""Runs on a linked git repository: the agents read the code through their tools, each
run works on its own branch in its own worktree, the project's tests verify the change,
and approval merges it — or says why it did not, keeping the branch.

Real git repositories in tmp_path; the LLM is the fake Anthropic server, scripted.
"""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from core.sandbox import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from pipelines.models import AgentCall, PipelineRun, RunEvent, RunStatus
from pipelines.orchestrator import run_advance
from pipelines.selectors import run_diff, run_patch
from pipelines.services import (
    MergeRefused,
    run_approve,
    run_discard_branch,
    run_retry,
    run_start,
    runs_cleanup_worktrees,
)
from repos.services import repository_link
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}
CALC = "def add(a, b):\n    return a - b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n"
CHECK = "from app.calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) is {add(2, 3)}'\nprint('ok')\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo_root(tmp_path: Path, settings) -> Path:
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    root = tmp_path / "repos" / "calc"
    (root / "app").mkdir(parents=True)
    (root / "app" / "__init__.py").write_text("")
    (root / "app" / "calc.py").write_text(CALC)
    (root / "check.py").write_text(CHECK)
    (root / "README.md").write_text("# Calc\n")
    git(root, "init", "--quiet", "--initial-branch=main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "--quiet", "-m", "Initial")
    return root


@pytest.fixture
def linked(project, repo_root: Path):
    return repository_link(project=project, path=str(repo_root))


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Make add add", description="add(2, 3) should be 5")


READ_CALC = ToolReply(name="read_file", input={"path": "app/calc.py"})


def changes(*items: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    return {"changes": list(items)}


def log_text(run: PipelineRun, agent: str) -> str:
    events = RunEvent.objects.filter(run=run, type="agent-log").order_by("id")
    return "".join(e.data["chunk"] for e in events if e.data["agent"] == agent)


def test_the_coder_reads_then_changes_land_on_the_runs_branch(fake_llm, linked, repo_root, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="read_file", input={"path": "app/calc.py"}, text="Reading calc first. "),
        ToolReply(
            input=changes(
                {"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED},
                {"file_path": "app/util.py", "action": "create", "content": "TWO = 2\n"},
                {"file_path": "README.md", "action": "delete"},
            )
        ),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.branch == f"autocoder/task-{task.pk}-run-1"
    # The Planner saw the file tree; the Coder's second turn carried the file it read.
    planner_request, coder_first, coder_second, reviewer_request = fake_llm.requests
    assert "app/calc.py" in planner_request.prompt_text
    assert coder_first.forced_tool is None and "read_file" in coder_first.tool_names
    results = coder_second.tool_results
    assert len(results) == 1 and "return a - b" in json.dumps(results[0]["content"])
    assert "return a + b" in reviewer_request.prompt_text  # the real diff
    # Every turn is a costed call; the tool call shows in the live log.
    assert AgentCall.objects.filter(run=run, agent="coder").count() == 2
    assert "→ read_file" in log_text(run, "coder")

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


def test_a_conflicting_base_refuses_the_merge_and_keeps_the_branch(fake_llm, linked, repo_root, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    # Meanwhile someone changes the same line on main.
    (repo_root / "app" / "calc.py").write_text("def add(a, b):\n    return b + a  # theirs\n")
    git(repo_root, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qam", "Theirs")
    main_before = git(repo_root, "rev-parse", "main")

    with pytest.raises(MergeRefused) as refused:
        run_approve(run=run, actor=owner)

    assert refused.value.extra["conflicts"] == ["app/calc.py"]
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.merge_result["merged"] is False
    assert git(repo_root, "rev-parse", "main") == main_before
    assert git(repo_root, "status", "--porcelain") == ""
    assert git(repo_root, "rev-parse", "--verify", run.branch) == run.head_commit
    # The patch is there to resolve it by hand.
    assert "Subject: [PATCH] Make add add" in run_patch(run=run)


def test_changes_that_do_not_fit_the_files_go_back_to_the_coder(fake_llm, linked, repo_root, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        # create of a file that exists, and modify of one that does not: nothing applied.
        ToolReply(
            input=changes(
                {"file_path": "app/calc.py", "action": "create", "content": CALC_FIXED},
                {"file_path": "app/nope.py", "action": "modify", "content": "x = 1\n"},
            )
        ),
        # No review call for an unapplied change: straight to fixing.
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    first_review = run.review_history[0]
    assert first_review["pass"] is False
    assert {finding["file"] for finding in first_review["findings"]} == {"app/calc.py", "app/nope.py"}
    assert [call.agent for call in AgentCall.objects.filter(run=run)] == [
        "planner", "coder", "coder", "coder", "reviewer",
    ]  # fmt: skip
    assert "return a + b" in git(repo_root, "show", f"{run.branch}:app/calc.py")
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
        ToolReply(input=changes({"file_path": "app/util.py", "action": "create", "content": "X = 1\n"})),
        ToolReply(input=PASS),  # the Reviewer misses it, the tests do not
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    statuses = list(run.transitions.values_list("to_status", flat=True))
    assert statuses == [
        "queued", "planning", "coding", "verifying", "reviewing", "fixing", "verifying", "reviewing",
        "awaiting_approval",
    ]  # fmt: skip
    failed_review = run.review_history[0]
    assert failed_review["pass"] is False
    assert any("add(2, 3) is -1" in finding["message"] for finding in failed_review["findings"])
    # The Reviewer was told what the tests said; the Coder got the findings to fix.
    _, _, reviewer_first, coder_fixing, _, _ = fake_llm.requests
    assert "add(2, 3) is -1" in reviewer_first.prompt_text
    assert "add(2, 3) is -1" in coder_fixing.prompt_text
    assert run.verify_result["passed"] is True
    verifier_log = log_text(run, "verifier")
    assert "AssertionError" in verifier_log and "ok" in verifier_log


@needs_bwrap
def test_a_hanging_test_command_is_killed_at_its_timeout(fake_llm, linked, task, owner, settings) -> None:
    settings.VERIFY_TIMEOUT_SECONDS = 1
    linked.test_command = "sleep 60"
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = run_start(task=task, user=owner)
    for _ in range(4):  # queued → planning → coding → verifying → reviewing
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
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
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
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.PAUSED and run.verify_result is None
    assert "sandbox for test commands cannot be made" in run.error and "bubblewrap" in run.error
    assert "sandbox for test commands cannot be made" in log_text(run, "verifier")
    assert not (Path(run.worktree_path) / "ran.txt").exists()
    # The operator installs bubblewrap; Retry runs the tests, sandboxed.
    settings.SANDBOX_BWRAP = "bwrap"
    sandbox_status(refresh=True)
    run = drive_in_process(run_retry(run=run, actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.verify_result["passed"] is True and run.verify_result["sandboxed"] is True


def test_the_tool_loop_stops_at_its_turn_limit(fake_llm, linked, task, owner, settings) -> None:
    settings.AGENT_TOOL_MAX_TURNS = 2
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="list_files", input={"path": "."}),
        ToolReply(name="search_code", input={"pattern": "def add"}),
        ToolReply(input=changes({"file_path": "app/util.py", "action": "create", "content": "X = 1\n"})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    coder_requests = [r for r in fake_llm.requests if "submit_changes" in r.tool_names]
    assert [r.forced_tool for r in coder_requests] == [None, None, "submit_changes"]
    assert "app/calc.py:1" in json.dumps(coder_requests[2].tool_results[-1]["content"])


def test_tools_refuse_paths_outside_the_worktree(fake_llm, linked, task, owner) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="read_file", input={"path": "../../../../etc/passwd"}),
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
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
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    from pipelines.services import run_cancel

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


def test_approve_conflict_over_the_api_is_409_with_the_conflicts(
    fake_llm, linked, repo_root, task, owner, owner_client
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    (repo_root / "app" / "calc.py").write_text("def add(a, b):\n    return sum((a, b))\n")
    git(repo_root, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qam", "Theirs")

    response = owner_client.post(f"/api/runs/{run.pk}/approve")
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "merge_refused"
    assert body["extra"]["conflicts"] == ["app/calc.py"]

    detail = owner_client.get(f"/api/runs/{run.pk}").json()
    assert detail["status"] == "awaiting_approval" and detail["merge_result"]["merged"] is False
    assert "download_patch" in detail["allowed_actions"]
    patch = owner_client.get(f"/api/runs/{run.pk}/patch")
    assert patch.status_code == 200 and patch["Content-Type"].startswith("text/x-patch")
    assert b"return a + b" in patch.content


def test_another_users_patch_is_404(fake_llm, linked, task, owner, other_client) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert other_client.get(f"/api/runs/{run.pk}/patch").status_code == 404
    assert other_client.post(f"/api/runs/{run.pk}/discard-branch").status_code == 404


@needs_bwrap
def test_the_demo_repository_runs_end_to_end_with_the_unscripted_model(
    fake_llm, project, task, owner, tmp_path: Path, settings
) -> None:
    """`make demo`'s sample repository and the fake model's default answers: the Coder
    looks around first, the tests run, approval lands the commit on main."""
    from django.core.management import call_command

    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    call_command("repos_demo")
    repository = repository_link(project=project, path="demo-app", test_command="python3 run_tests.py")

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.verify_result["passed"] is True
    assert "PASSED tests/test_feature.py::test_feature" in run.verify_result["output"]
    assert "→ list_files" in log_text(run, "coder")
    run_approve(run=run, actor=owner)
    repo = Path(repository.path)
    assert git(repo, "show", "main:src/feature.py").startswith("def feature()")


def test_the_tool_loop_stops_at_its_token_limit(fake_llm, linked, task, owner, settings) -> None:
    settings.AGENT_TOOL_TOKEN_LIMIT = 1000
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name="list_files", input={"path": "."}, input_tokens=1500, output_tokens=20),
        ToolReply(input=changes({"file_path": "app/util.py", "action": "create", "content": "X = 1\n"})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    coder_requests = [r for r in fake_llm.requests if "submit_changes" in r.tool_names]
    assert [r.forced_tool for r in coder_requests] == [None, "submit_changes"]
    # Both turns are paid for and counted.
    coder_calls = AgentCall.objects.filter(run=run, agent="coder")
    assert coder_calls.count() == 2 and coder_calls.first().input_tokens == 1500


@pytest.mark.parametrize(
    ("first_reads", "reported"),
    [
        ([], "you have not read app/calc.py"),
        (
            [ToolReply(name="read_file", input={"path": "app/calc.py", "start": 1, "end": 1})],
            "only lines 1 of app/calc.py (2 lines)",
        ),
    ],
)
def test_a_modify_of_content_the_coder_has_not_seen_is_reported_not_applied(
    fake_llm, linked, repo_root, task, owner, first_reads, reported
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        *first_reads,
        ToolReply(
            input=changes(
                {"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED},
                {"file_path": "app/util.py", "action": "create", "content": "X = 1\n"},
            )
        ),
        # Told so, it reads the file and resubmits.
        READ_CALC,
        ToolReply(input=changes({"file_path": "app/calc.py", "action": "modify", "content": CALC_FIXED})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    [finding] = run.review_history[0]["findings"]
    assert finding["file"] == "app/calc.py" and reported in finding["message"]
    # Nothing of the refused submission landed, not even its valid create.
    assert git(repo_root, "rev-list", "--count", f"main..{run.branch}") == "1"
    assert git(repo_root, "show", f"{run.branch}:app/calc.py") + "\n" == CALC_FIXED
    assert "app/util.py" not in git(repo_root, "ls-tree", "-r", "--name-only", run.branch)


def test_in_a_fix_round_the_coder_may_replace_what_it_wrote_itself_without_reading_it(
    fake_llm, linked, repo_root, task, owner
) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(input=changes({"file_path": "app/util.py", "action": "create", "content": "X = 1\n"})),
        ToolReply(input={"pass": False, "findings": [{"file": "app/util.py", "severity": "major", "message": "X=2"}]}),
        # Its prompt carries app/util.py as it wrote it: no read needed.
        ToolReply(input=changes({"file_path": "app/util.py", "action": "modify", "content": "X = 2\n"})),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL
    assert git(repo_root, "show", f"{run.branch}:app/util.py") == "X = 2"
    assert not run.change_problems
