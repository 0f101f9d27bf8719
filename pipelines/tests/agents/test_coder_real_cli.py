"""The REAL Claude CLI (tools/claude-cli) as every agent of a run — Planner, Coder,
Reviewer — talking to the fake Messages API, where the demo model answers the CLI's own
tools (llm/demo/coder_cli.py): the whole run, its one shell command, out of turns."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from pipelines.agents import prompts as agents
from pipelines.agents.coder import OUT_OF_TURNS
from pipelines.models import RunStatus
from pipelines.phases.driver import run_advance
from pipelines.runs.services import run_start
from pipelines.tests.agents.test_coder_cli import advance_to_coding
from pipelines.tests.repositories import git, log_text
from tests.fake_anthropic import FakeAnthropicServer, TextReply, ToolReply
from tests.real_claude import real_claude
from tests.workers import drive_in_process

pytestmark = [pytest.mark.django_db, needs_bwrap]


@pytest.fixture
def repo_root(repo_root: Path) -> Path:
    sandbox_status(refresh=True)
    return repo_root


REAL_TESTS = "python3 -c 'import app.calc; print(\"calc imported\")'"


@pytest.fixture
def real_cli(fake_llm, settings) -> FakeAnthropicServer:
    """Every agent through the real CLI, which talks to the fake API (the demo model,
    answering the CLI's own tools) with the key and base URL the server is configured with."""
    settings.LLM_PROVIDER = "claude-cli"
    settings.CLAUDE_CLI_PATH = real_claude()
    return fake_llm


def test_the_real_cli_plans_edits_tests_reviews_and_the_run_awaits_approval(
    linked, repo_root, task, owner, real_cli
) -> None:
    linked.test_command = REAL_TESTS
    linked.save()
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.verify_result["passed"] is True
    # The demo Coder wrote its feature and test through the CLI's Write tool.
    changed = set(git(repo_root, "diff", "--name-only", f"main..{run.branch}").splitlines())
    assert changed == {"src/feature.py", "tests/test_feature.py"}
    # No bytecode (the CLI and the tests it imports app.calc with write none) reached the branch.
    tree = git(repo_root, "ls-tree", "-r", "--name-only", run.branch).splitlines()
    assert not [path for path in tree if "__pycache__" in path or path.endswith(".pyc")]
    log = log_text(run, agents.CODER)
    assert '→ Glob {"pattern": "**/*", "path": "/workspace"}' in log
    assert '→ Write {"file_path": "/workspace/src/feature.py"' in log
    # Planner and Reviewer answered through --json-schema, each under AutoCoder's own prompt.
    answers = [r for r in real_cli.requests if r.structured_output_schema]
    assert {r.structured_output_schema["title"] for r in answers} >= {"submit_plan", "submit_review"}
    assert all(len(r.system_text) < 20_000 for r in answers)


def test_the_real_cli_runs_the_test_command_and_refuses_any_other(linked, repo_root, task, owner, real_cli) -> None:
    """``dontAsk``: an ``rm`` the model asks for is refused, not run (acceptEdits would run
    it), and so is a redirection; the test command runs."""
    linked.test_command = REAL_TESTS
    linked.save()
    run = advance_to_coding(task, owner)
    real_cli.reset()
    real_cli.script(
        ToolReply(name="Bash", input={"command": "rm -f check.py app/calc.py", "description": "clean up"}),
        ToolReply(name="Bash", input={"command": "echo hi > made-by-a-redirection.txt", "description": "write"}),
        ToolReply(name="Bash", input={"command": "autocoder-run-tests", "description": "Run the tests"}),
        TextReply("Done."),
    )
    run_advance(run_id=run.pk)
    run.refresh_from_db()

    worktree = Path(run.worktree_path)
    assert (worktree / "check.py").exists() and (worktree / "app" / "calc.py").exists()
    assert not (worktree / "made-by-a-redirection.txt").exists()
    log = log_text(run, agents.CODER)
    assert log.count("error: Permission to use Bash") == 2
    assert "  calc imported" in log  # the one allowed command's output


def test_the_real_cli_out_of_turns_is_a_finding(linked, repo_root, task, owner, real_cli, settings) -> None:
    settings.CODER_MAX_TURNS = 1
    run = advance_to_coding(task, owner)
    run_advance(run_id=run.pk)
    run.refresh_from_db()

    assert run.coder_findings == [
        {"file": "", "line": None, "severity": "major", "message": OUT_OF_TURNS.format(what="turns", limit=1)}
    ]
    assert "ran out of turns" in log_text(run, agents.CODER)
