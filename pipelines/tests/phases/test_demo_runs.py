"""`make demo`'s whole story, unscripted: the demo model (llm/demo) drives runs on the demo
repository (``manage.py repos_demo``) through every phase, as a person trying AutoCoder
without a key would see them.

Real git, a real sandboxed test command; the model is the tests' fake Anthropic server
answering as the demo model does (nothing scripted).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command

from core.tests.test_sandbox import needs_bwrap
from llm.acp.provider import TEST_COMMAND_HINT
from llm.demo.coder_opencode import TEST_COMMAND as OPENCODE_TEST_COMMAND
from llm.demo.demo_app import BIG_FILE, BUGS, TEST_FILE
from llm.demo.request import MEMORIES_HEADING
from pipelines.agents.recall import MEMORIES_HEADING as RECALL_HEADING
from pipelines.models import FeedbackOrigin, PipelineRun, RunStatus
from pipelines.review.selectors import run_diff
from pipelines.review.services import BaseMoved, line_comment_create, run_approve, run_request_changes
from pipelines.runs.services import run_start
from pipelines.tests.repositories import git, log_text
from repos.models import Repository
from repos.services import repository_link
from tests.factories import TaskFactory
from tests.fake_anthropic import EDITOR, FakeAnthropicServer
from tests.fake_openai import FakeOpenAIServer
from tests.readable import acp_agents_reachable
from tests.workers import drive_in_process

pytestmark = [pytest.mark.django_db, needs_bwrap]


@pytest.fixture
def demo_repository(project) -> Repository:
    call_command("repos_demo")
    return repository_link(project=project, path="demo-app", test_command="python3 run_tests.py")


def _run(project, owner, title: str, description: str = "") -> PipelineRun:
    task = TaskFactory(project=project, title=title, description=description)
    return drive_in_process(run_start(task=task, user=owner))


def _changed_line(run: PipelineRun, path: str) -> int:
    """The new-file number of the first line the run's diff added to ``path``."""
    [file] = [file for file in run_diff(run=run).files if file.path == path]
    return next(row.new_line for row in file.rows if row.kind == "add" and row.new_line)


def _first_bug_fixed(run: PipelineRun) -> str:
    """Checks that ``run`` awaits approval with the first known bug fixed in one line and a
    new test for it added (nothing removed); the Coder's log."""
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    files = {file.path: file for file in run_diff(run=run).files}
    big = files[BIG_FILE]
    assert (big.action, big.added, big.removed) == ("modify", 1, 1)
    assert f"+{BUGS[0].new}" in big.unified and f"-{BUGS[0].old}" in big.unified
    assert files[TEST_FILE].removed == 0 and BUGS[0].test_name in files[TEST_FILE].unified
    return log_text(run, "coder")


def _file_on_branch(run: PipelineRun, path: str) -> str:
    return git(Path(run.task.project.repository.path), "show", f"{run.branch}:{path}")


def test_the_first_run_fixes_one_line_of_the_big_module_test_first(
    fake_llm: FakeAnthropicServer, demo_repository, project, owner
) -> None:
    run = _run(project, owner, "Fix the reorder report")

    coder_log = _first_bug_fixed(run)
    assert f'→ {EDITOR} {{"command": "str_replace", "path": "{BIG_FILE}"' in coder_log
    assert f'"command": "create", "path": "{BIG_FILE}"' not in coder_log
    # The tests ran twice: failing with the new test before the one-line fix, passing after.
    first_run = coder_log.index("→ run_tests")
    fix = coder_log.index('"command": "str_replace"')
    second_run = coder_log.index("→ run_tests", fix)
    assert first_run < coder_log.index("error: The tests failed (exit status 1).") < fix < second_run
    assert f"FAILED tests/test_inventory.py::{BUGS[0].test_name}" in coder_log[first_run:fix]
    assert "The tests passed (exit status 0)." in coder_log[second_run:]
    assert run.verify_result["passed"] is True
    # It said which subtask of the plan it began.
    assert coder_log.index("— Subtask 1 of 2:") < coder_log.index("— Subtask 2 of 2:") < fix


def test_a_request_for_changes_and_its_line_comments_are_followed(
    fake_llm: FakeAnthropicServer, demo_repository, project, owner
) -> None:
    run = _run(project, owner, "Fix the reorder report")
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    fixed_line = _changed_line(run, BIG_FILE)
    test_line = _changed_line(run, TEST_FILE)
    body = "Rename `needs_reorder` to `is_due_for_reorder`"
    line_comment_create(run=run, author=owner, path=BIG_FILE, line_start=fixed_line, body=body)
    line_comment_create(run=run, author=owner, path=TEST_FILE, line_start=test_line + 2, body="Name the bug it shows")
    run_request_changes(run=run, feedback="Please see my two comments.", actor=owner)

    run = drive_in_process(run)

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    module = _file_on_branch(run, BIG_FILE)
    tests = _file_on_branch(run, TEST_FILE)
    assert re.search(r"\bneeds_reorder\b", module + tests) is None
    assert "    def is_due_for_reorder(self) -> bool:" in module
    assert "item.is_due_for_reorder()" in module and "item.is_due_for_reorder()" in tests
    # The other comment is written where it was made: above the commented line.
    lines = tests.splitlines()
    assert lines[test_line + 1] == "# Name the bug it shows"
    assert lines[test_line + 2].startswith("def test_")
    assert run.verify_result["passed"] is True  # the rename reached every use
    coder_log = log_text(run, "coder")
    assert '→ search_code {"pattern": "needs_reorder", "fixed_string": true}' in coder_log
    assert "renamed `needs_reorder` to `is_due_for_reorder`" in coder_log


def test_after_an_approved_run_the_next_task_fixes_the_next_line_and_recalls_the_lesson(
    fake_llm: FakeAnthropicServer, demo_repository, project, owner
) -> None:
    first = _run(project, owner, "Fix the reorder report")
    run_request_changes(run=first, feedback="Keep every fix to one line of the module.", actor=owner)
    first = drive_in_process(first)
    run_approve(run=first, actor=owner)
    repo = Path(demo_repository.path)
    assert BUGS[0].new in git(repo, "show", f"main:{BIG_FILE}").splitlines()

    second = _run(project, owner, "Fix the bulk discount")

    assert second.status == RunStatus.AWAITING_APPROVAL, second.error
    [big] = [file for file in run_diff(run=second).files if file.path == BIG_FILE]
    assert (big.added, big.removed) == (1, 1) and f"+{BUGS[1].new}" in big.unified
    assert second.verify_result["passed"] is True
    # The lesson of the first run's request for changes reached the second run's Coder, and it said so.
    coder_requests = [request for request in fake_llm.requests if EDITOR in request.tool_names]
    assert MEMORIES_HEADING in coder_requests[-1].system_text
    assert "Keeping in mind what the team taught me: “Keep every fix to one line of the module.”" in log_text(
        second, "coder"
    )
    run_approve(run=second, actor=owner)

    # And on: the last bug, then (every bug fixed) a one-line version bump.
    third = _run(project, owner, "Fix releasing")
    assert BUGS[2].new in _file_on_branch(third, BIG_FILE).splitlines()
    run_approve(run=third, actor=owner)
    fourth = _run(project, owner, "Release it")
    assert fourth.status == RunStatus.AWAITING_APPROVAL, fourth.error
    [big] = [file for file in run_diff(run=fourth).files if file.path == BIG_FILE]
    assert (big.added, big.removed) == (1, 1) and '+__version__ = "1.4.1"' in big.unified


def test_a_task_that_needs_no_change_gets_a_run_without_a_diff(
    fake_llm: FakeAnthropicServer, demo_repository, project, owner
) -> None:
    run = _run(project, owner, "Why does the reorder report list the emptiest items first?")

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run_diff(run=run).files == []
    coder_log = log_text(run, "coder")
    assert '"command": "str_replace"' not in coder_log and '"command": "create"' not in coder_log
    assert "Nothing to change: the task asks a question." in coder_log


def test_the_demo_model_reads_the_recalled_lessons_under_the_recall_heading() -> None:
    assert MEMORIES_HEADING == RECALL_HEADING


def test_the_demo_model_reads_the_test_command_an_acp_agent_is_told() -> None:
    told = TEST_COMMAND_HINT.format(command="python3 run_tests.py --fast")
    found = OPENCODE_TEST_COMMAND.search(f"Instructions.\n{told}\n\n---\n\n# Task")
    assert found is not None and found.group("command") == "python3 run_tests.py --fast"


def test_through_the_real_claude_cli_the_demo_fixes_the_line_test_first(
    fake_llm: FakeAnthropicServer, demo_repository, project, owner, settings
) -> None:
    """`LLM_PROVIDER=claude-cli make demo`: the real CLI (tools/claude-cli) is every agent,
    the demo model behind it answering the CLI's own tools (llm/demo/coder_cli.py)."""
    from tests.real_claude import real_claude

    settings.LLM_PROVIDER = "claude-cli"
    settings.CLAUDE_CLI_PATH = real_claude()
    run = _run(project, owner, "Fix the reorder report")

    # The new test was inserted after the last line through an Edit (the CLI has no insert).
    coder_log = _first_bug_fixed(run)
    first_run = coder_log.index('→ Bash {"command": "autocoder-run-tests"')
    fix = coder_log.index(f'"file_path": "/workspace/{BIG_FILE}", "old_string"')
    second_run = coder_log.index('→ Bash {"command": "autocoder-run-tests"', fix)
    assert first_run < fix < second_run
    assert "It fails, as it should." in coder_log[first_run:second_run]
    assert run.verify_result["passed"] is True


def test_through_the_real_opencode_over_acp_the_demo_fixes_the_line_test_first(
    fake_llm: FakeAnthropicServer, fake_openai: FakeOpenAIServer, demo_repository, project, owner, settings
) -> None:
    """`make demo` with the project's Coder switched to opencode (another vendor, over
    ACP): the real opencode (tools/acp-agents) in its sandbox asks the demo model through
    Chat Completions, which answers opencode's own tools (llm/demo/coder_opencode.py). The
    API is on the host's loopback, as in the demo: the relay stands in for it there."""
    settings.ACP_AGENTS = acp_agents_reachable(settings.ACP_AGENTS, settings.ACP_AGENTS_ROOT)
    settings.ACP_OPENAI_BASE_URL = fake_openai.base_url
    settings.ACP_OPENAI_API_KEY = "demo-key-not-secret"
    settings.ACP_OPENAI_MODEL = "demo-model"
    project.coder_agent = "opencode"
    project.save()
    run = _run(project, owner, "Fix the reorder report")

    # The new test was inserted after the last line through an edit (opencode has no insert).
    coder_log = _first_bug_fixed(run)
    assert "[Coder: opencode, over ACP]" in coder_log
    # Its glob found ripgrep, and its own writes after AutoCoder's found files it may write.
    assert "[Tool failed" not in coder_log
    first_run = coder_log.index("[Allowed: python3 run_tests.py]")
    fix = coder_log.index("It fails, as it should. The fix is one line")
    second_run = coder_log.index("[Allowed: python3 run_tests.py]", fix)
    assert first_run < fix < second_run
    assert "failed before the fix and passes after it" in coder_log[second_run:]
    assert run.verify_result["passed"] is True
    # opencode's own tools carried the script: read, glob, edit, bash.
    called = [call["function"]["name"] for request in fake_openai.chat_requests for message in
              request.wire_body["messages"] for call in message.get("tool_calls") or []]  # fmt: skip
    assert {"glob", "read", "edit", "bash"} <= set(called)


def test_a_failing_check_on_the_pull_request_sends_the_demo_coder_after_the_bug_it_caught(
    fake_llm: FakeAnthropicServer, demo_repository, project, owner
) -> None:
    run = _run(project, owner, "Fix the reorder report")
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    checks = f"The check `unit` failed:\n```\nFAILED tests/test_inventory.py::{BUGS[1].test_name}\n```"

    run = drive_in_process(run_request_changes(run=run, feedback=checks, origin=FeedbackOrigin.CHECKS))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert "The pull request's checks failed" in log_text(run, "coder")
    branch = _file_on_branch(run, BIG_FILE)
    assert BUGS[0].new in branch and BUGS[1].new in branch  # the first fix kept, the next bug fixed
    assert run.verify_result["passed"] is True


def test_a_moved_base_that_conflicts_is_resolved_by_the_demo_coder_then_merged(
    fake_llm: FakeAnthropicServer, demo_repository, project, owner
) -> None:
    run = _run(project, owner, "Fix the reorder report")
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    # A teammate changed the same line on main meanwhile.
    root = Path(demo_repository.path)
    theirs = BUGS[0].old + "  # checked nightly"
    text = git(root, "show", f"main:{BIG_FILE}").replace(BUGS[0].old, theirs) + "\n"
    git(root, "checkout", "-q", "main")
    (root / BIG_FILE).write_text(text)
    git(root, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qam", "Note the nightly check")

    with pytest.raises(BaseMoved):
        run_approve(run=run, actor=owner)
    run.refresh_from_db()
    assert run.status == RunStatus.CODING and run.feedback_origin == FeedbackOrigin.BASE
    run = drive_in_process(run)

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert "both changed these lines: kept this branch's change" in log_text(run, "coder")
    branch = _file_on_branch(run, BIG_FILE)
    assert "<<<<<<<" not in branch and ">>>>>>>" not in branch and BUGS[0].new in branch
    run = run_approve(run=run, actor=owner)
    assert run.status == RunStatus.APPROVED and run.merge_result["merged"] is True
    assert BUGS[0].new in git(root, "show", f"main:{BIG_FILE}")
