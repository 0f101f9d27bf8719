"""The Claude CLI as the Coder (pipelines/agents/coder_cli.py, llm/providers/claude_cli.py):
it edits the run's worktree itself, in the sandbox, with only its file tools (and
exactly the test command); the branch diff is its edit. The fake CLI (tests/bin/claude)
really edits files in its working folder and prints stream-json events: these tests probe
what it reaches and what a run makes of its events and faults. The real CLI's whole runs
are in test_coder_real_cli.py.
"""

from __future__ import annotations

import json
import socket
import time
from decimal import Decimal
from pathlib import Path

import pytest

from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from llm.providers import claude_cli, claude_cli_events
from memory.models import ContextItem, Memory
from memory.models.semantic import MemorySource
from memory.services.context import context_decode
from pipelines.agents import prompts as agents
from pipelines.agents.coder import OUT_OF_TURNS
from pipelines.models import AgentCall, PipelineRun, RunStatus
from pipelines.phases.driver import run_advance
from pipelines.runs.services import run_cancel, run_start
from pipelines.tests.repositories import CALC, CALC_FIXED, git, log_text
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_claude import fake_claude
from tests.workers import drive_in_process

pytestmark = [pytest.mark.django_db, needs_bwrap]

FAKE_CLAUDE = fake_claude()
SECRET = "s3cr3t-the-cli-must-not-see"
FILE_TOOLS = "Read,Edit,Write,Glob,Grep"


@pytest.fixture
def repo_root(repo_root: Path) -> Path:
    sandbox_status(refresh=True)
    return repo_root


@pytest.fixture(autouse=True)
def cli(settings, monkeypatch) -> list[list[str]]:
    """The run's provider is the fake CLI; the commands it was started with as the Coder."""
    settings.LLM_PROVIDER = "claude-cli"
    settings.CLAUDE_CLI_PATH = FAKE_CLAUDE
    settings.CODER_MAX_TURNS = 7
    fake_settings = {
        "FAKE_CLAUDE_MODE",
        "FAKE_CLAUDE_EDIT_MODE",
        "FAKE_CLAUDE_EDITS",
        "FAKE_CLAUDE_SECRET_PATH",
        "FAKE_CLAUDE_SUMMARY",
    }
    monkeypatch.setattr(claude_cli, "CLI_ENVIRONMENT", claude_cli.CLI_ENVIRONMENT | fake_settings)
    monkeypatch.setenv("FAKE_CLAUDE_EDITS", json.dumps([{"file_path": "app/calc.py", "content": CALC_FIXED}]))
    commands: list[list[str]] = []
    real = claude_cli.ClaudeCliProvider.edit_command

    def recorded(self, request, executable):
        command = real(self, request, executable)
        commands.append(command)
        return command

    monkeypatch.setattr(claude_cli.ClaudeCliProvider, "edit_command", recorded)
    return commands


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def advance_to_coding(task: Task, owner) -> PipelineRun:
    run = run_start(task=task, user=owner)
    run_advance(run_id=run.pk)  # queued → planning → coding (or preparing, with a test command)
    run.refresh_from_db()
    if run.status == RunStatus.PREPARING:
        run_advance(run_id=run.pk)  # the base commit's tests, then coding
        run.refresh_from_db()
    assert run.status == RunStatus.CODING
    return run


def test_the_cli_edits_the_worktree_and_the_branch_holds_exactly_that_edit(linked, repo_root, task, owner, cli) -> None:
    task.project.instructions = "Keep functions small."
    task.project.save()
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert git(repo_root, "diff", "--name-only", f"main..{run.branch}") == "app/calc.py"
    assert git(repo_root, "show", f"{run.branch}:app/calc.py") == CALC_FIXED.strip()
    assert git(repo_root, "show", "main:app/calc.py") == CALC.strip()  # main untouched
    assert [change["file_path"] for change in run.file_changes] == ["app/calc.py"]
    # Not the whole-file answer (submit_changes): one agent run of the CLI, in the worktree.
    [command] = cli
    assert "stream-json" in command and "--verbose" in command
    assert command[command.index("-p") + 1] == "--output-format"  # the prompt goes on stdin
    # Only its file tools: no shell (no test command), no web tools, no MCP servers.
    assert option(command, "--tools") == FILE_TOOLS
    assert option(command, "--allowedTools") == FILE_TOOLS
    assert "--dangerously-skip-permissions" not in command and "--mcp-config" not in command
    denied = set(option(command, "--disallowedTools").split(","))
    assert denied >= {"WebFetch", "WebSearch", "Read(//home/sandbox/**)", "Edit(//home/sandbox/**)"}
    assert option(command, "--setting-sources") == "user"  # not the repository's .claude/settings.json
    # Only what --allowedTools names runs: not the shell commands acceptEdits lets through.
    assert "--strict-mcp-config" in command and option(command, "--permission-mode") == "dontAsk"
    assert option(command, "--max-turns") == "7"
    system = option(command, "--append-system-prompt")
    assert system.startswith(agents.CODER_CLI_EDITING_ROLE[:40]) and "Keep functions small." in system
    # The live log shows the tool calls as they came; the file was edited inside the
    # sandbox, where the worktree is /workspace.
    log = log_text(run, agents.CODER)
    assert "Editing for: # Task" in log  # it was given the editing prompt
    # Told of no tool it lacks: start_subtask is the built-in Coder's, MultiEdit is gone.
    prompt = AgentCall.objects.get(run=run, agent=agents.CODER).prompt
    assert "submit_changes" not in prompt and "start_subtask" not in prompt
    assert "MultiEdit" not in system
    assert '→ Edit {"file_path": "/workspace/app/calc.py"' in log
    assert "Wrote /workspace/app/calc.py" in log
    # Recorded and costed like any agent call, at the CLI's own figure.
    call = AgentCall.objects.get(run=run, agent=agents.CODER)
    assert (call.input_tokens, call.output_tokens) == (100, 200)
    assert (call.cache_creation_input_tokens, call.cache_read_input_tokens) == (300, 400)
    assert call.cost_usd == Decimal("0.042100")
    assert call.response["tool_calls"][0]["name"] == "Edit"
    others = AgentCall.objects.filter(run=run).exclude(agent=agents.CODER)
    assert run.cost_usd == Decimal("0.042100") + sum(c.cost_usd for c in others)
    assert run.cache_read_input_tokens == 400


def test_with_a_test_command_exactly_that_command_is_allowed(linked, repo_root, task, owner, cli) -> None:
    linked.test_command = "python3 check.py"
    linked.save()
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.verify_result["passed"] is True  # the edit fixed add
    [command] = cli
    # The one shell command runs the test command in a sandbox of its own.
    assert option(command, "--tools") == FILE_TOOLS + ",Bash"
    assert option(command, "--allowedTools") == FILE_TOOLS + ",Bash(autocoder-run-tests)"
    assert "`autocoder-run-tests`" in option(command, "--append-system-prompt")


def test_a_memory_marker_in_the_clis_summary_is_kept_and_left_out_of_the_commit(
    linked, repo_root, task, owner, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_SUMMARY", "Fixed add. [MEMORY: calc.py has no tests of its own]")
    run = advance_to_coding(task, owner)
    run_advance(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == RunStatus.REVIEWING, run.error
    memory = Memory.objects.get()
    assert (memory.content, memory.agent, memory.project) == ("calc.py has no tests of its own", "coder", task.project)
    assert (memory.source, memory.source_run_id) == (MemorySource.AGENT, run.pk)
    assert git(repo_root, "log", "-1", "--format=%B", run.branch).endswith("Fixed add.")
    (changes,) = ContextItem.objects.filter(run=run, type="changes")
    assert context_decode(changes)["output"]["summary"] == "Fixed add."
    assert "[Remembered for the coder: calc.py has no tests of its own]" in log_text(run, agents.CODER)


def test_out_of_turns_is_a_finding_and_the_edits_so_far_are_committed(
    linked, repo_root, task, owner, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "max_turns")
    run = advance_to_coding(task, owner)
    run_advance(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == RunStatus.REVIEWING
    assert run.change_problems == [] and run.coder_findings == [
        {"file": "", "line": None, "severity": "major", "message": OUT_OF_TURNS.format(what="turns", limit=7)}
    ]
    assert git(repo_root, "diff", "--name-only", f"main..{run.branch}") == "app/calc.py"
    assert "ran out of turns" in log_text(run, agents.CODER)


def test_cancelling_mid_run_kills_the_cli_and_commits_nothing(linked, repo_root, task, owner, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "hang")
    run = advance_to_coding(task, owner)
    worktree = Path(run.worktree_path) if run.worktree_path else None
    heartbeat: list[Path] = []
    real_take = claude_cli_events.CliEvents.take

    def cancel_once_it_edited(self, line):
        real_take(self, line)
        event = json.loads(line)
        if event.get("type") == "user" and not heartbeat:
            path = Path(PipelineRun.objects.get(pk=run.pk).worktree_path or worktree) / ".fake-claude-alive"
            deadline = time.monotonic() + 10
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            heartbeat.append(path)
            run_cancel(run=PipelineRun.objects.get(pk=run.pk), actor=owner)

    monkeypatch.setattr(claude_cli_events.CliEvents, "take", cancel_once_it_edited)
    started = time.monotonic()
    run_advance(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == RunStatus.CANCELLED
    assert time.monotonic() - started < 20
    assert git(repo_root, "rev-list", "--count", f"main..{run.branch}") == "0"
    assert not AgentCall.objects.filter(run=run, agent=agents.CODER).exists()
    # It was running (its heartbeat grew), and it is dead: the heartbeat stopped.
    [path] = heartbeat
    assert path.exists()
    size = path.stat().st_size
    time.sleep(0.5)
    assert path.stat().st_size == size


def test_the_cli_cannot_read_a_secret_outside_the_worktree(
    linked, repo_root, task, owner, tmp_path, monkeypatch, settings
) -> None:
    secret = tmp_path / "db.sqlite3"
    secret.write_text(SECRET)
    secret.chmod(0o644)  # readable by anyone on the host: only the sandbox keeps it out
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "read_secret")
    monkeypatch.setenv("FAKE_CLAUDE_SECRET_PATH", str(secret))
    run = advance_to_coding(task, owner)
    run_advance(run_id=run.pk)

    call = AgentCall.objects.get(run=run, agent=agents.CODER)
    assert call.response_text.startswith("secret unreadable: FileNotFoundError")
    assert SECRET not in log_text(run, agents.CODER)

    # The same fake does read it where the operator turned the sandbox off.
    settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = True
    other = TaskFactory(project=task.project, title="Again", description="d")
    run = advance_to_coding(other, owner)
    run_advance(run_id=run.pk)
    call = AgentCall.objects.get(run=run, agent=agents.CODER)
    assert call.response_text == f"SECRET READ: {SECRET}"
    assert "DISABLED by UNSAFE_RUN_TESTS_WITHOUT_SANDBOX" in log_text(run, agents.CODER)


def test_without_a_sandbox_the_cli_does_not_run_and_the_run_pauses_saying_why(
    linked, repo_root, task, owner, settings
) -> None:
    run = advance_to_coding(task, owner)
    settings.SANDBOX_BWRAP = "/nonexistent/bwrap"
    sandbox_status(refresh=True)
    run_advance(run_id=run.pk)
    run.refresh_from_db()

    assert run.status == RunStatus.PAUSED
    assert "sandbox" in run.error and "bubblewrap" in run.error
    # git runs in the sandbox too: the coding round stops at its first git command,
    # before the CLI is started.
    assert "cannot be made" in run.error
    assert not AgentCall.objects.filter(run=run, agent=agents.CODER).exists()
    assert (Path(run.worktree_path) / "app" / "calc.py").read_text() == CALC  # the CLI never ran


def test_the_test_command_the_cli_runs_sees_no_login_and_no_loopback_of_the_server(
    linked, repo_root, task, owner, tmp_path, monkeypatch
) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"claudeAiOauth": {"accessToken": SECRET}}))
    (home / ".claude.json").write_text(json.dumps({"primaryApiKey": SECRET + "-key"}))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    service = socket.create_server(("127.0.0.1", 0))  # a service of the server's, as Redis is
    service.settimeout(0.5)
    port = service.getsockname()[1]
    linked.test_command = (
        "echo STARTED; cat $HOME/.claude/.credentials.json $HOME/.claude/.claude.json; env; "
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\" && echo REACHED"
    )
    linked.save()
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")
    run = advance_to_coding(task, owner)
    run_advance(run_id=run.pk)

    call = AgentCall.objects.get(run=run, agent=agents.CODER)
    assert "STARTED" in call.response_text
    assert SECRET not in call.response_text and "REACHED" not in call.response_text
    with pytest.raises(TimeoutError):
        service.accept()
    service.close()


def test_a_whole_run_leaves_no_transcript_of_any_agent(linked, repo_root, task, owner, tmp_path, monkeypatch) -> None:
    """Planner, Coder and Reviewer each run the CLI in a sandbox with a config folder of
    its own: the server's ~/.claude keeps no transcript of their prompts."""
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert {call.agent for call in AgentCall.objects.filter(run=run)} >= {"planner", "coder", "reviewer"}
    assert list((home / ".claude" / "projects").iterdir()) == []
    assert sorted(path.name for path in (home / ".claude").iterdir()) == ["projects"]


def test_the_test_command_the_cli_runs_sees_the_repository_read_only(
    linked, repo_root, task, owner, monkeypatch
) -> None:
    """The test command nested in the CLI's sandbox reads git through the same view."""
    base = git(repo_root, "rev-parse", "HEAD")
    linked.test_command = "git log --format=%H -1; git status --porcelain >/dev/null && echo STATUS-OK; cat .git"
    linked.save()
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")
    run = advance_to_coding(task, owner)
    run_advance(run_id=run.pk)

    call = AgentCall.objects.get(run=run, agent=agents.CODER)
    assert base in call.response_text and "STATUS-OK" in call.response_text, call.response_text
    assert "gitdir: /.git-worktree" in call.response_text
    assert str(repo_root) not in call.response_text


def test_the_cli_reads_messages_as_it_starts_and_one_sent_while_it_works_waits(
    linked, repo_root, task, owner, monkeypatch
) -> None:
    from pipelines.messages.selectors import NOTE_CLI_NEXT_ROUND, run_message_note
    from pipelines.messages.services import run_message_send
    from pipelines.models import RunMessage

    run = advance_to_coding(task, owner)
    before = run_message_send(run=run, author=owner, body="Keep calc.py's docstrings.")
    notes: list[str] = []
    real = claude_cli.ClaudeCliProvider.edit_command

    def person_types_while_the_cli_works(self, request, executable):  # type: ignore[no-untyped-def]
        meanwhile = run_message_send(run=run, author=owner, body="Also rename add to plus.")
        notes.append(run_message_note(message=meanwhile))
        return real(self, request, executable)

    monkeypatch.setattr(claude_cli.ClaudeCliProvider, "edit_command", person_types_while_the_cli_works)
    run_advance(run_id=run.pk)  # the coding phase: one call of the CLI

    assert "Keep calc.py's docstrings." in AgentCall.objects.get(run=run, agent=agents.CODER).prompt
    assert "Also rename add to plus." not in AgentCall.objects.get(run=run, agent=agents.CODER).prompt
    before.refresh_from_db()
    assert (before.delivered_agent, before.delivered_turn) == (agents.CODER, 0)
    # It could not be read mid-call: it waits (for the Reviewer now, or the Coder's next round).
    assert RunMessage.objects.get(body="Also rename add to plus.").delivered_at is None
    assert notes == [NOTE_CLI_NEXT_ROUND]


def test_the_clis_reply_to_a_line_comment_is_a_marker_in_its_summary(
    linked, repo_root, task, owner, monkeypatch
) -> None:
    from pipelines.agents.replies import REPLY_MARKER_HINT
    from pipelines.models import LineCommentAddressed, RunLineComment
    from pipelines.review.services import line_comment_create, run_request_changes

    task.project.learn_distil = False
    task.project.save()
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    named = line_comment_create(run=run, author=owner, path="app/calc.py", line_start=1, body="Call it plus?")
    summed = line_comment_create(run=run, author=owner, path="app/calc.py", line_start=2, body="b + a reads better")
    swapped = "def add(a, b):\n    return b + a\n"
    monkeypatch.setenv("FAKE_CLAUDE_EDITS", json.dumps([{"file_path": "app/calc.py", "content": swapped}]))
    monkeypatch.setenv("FAKE_CLAUDE_SUMMARY", f"Swapped them. [REPLY {named.pk}: add is what the callers import.]")
    run = drive_in_process(run_request_changes(run=run, feedback="See my comments", actor=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    prompt = AgentCall.objects.filter(run=run, agent=agents.CODER).last().prompt  # type: ignore[union-attr]
    assert REPLY_MARKER_HINT in prompt and f"## app/calc.py, line 1 (comment {named.pk})" in prompt
    by_id = {comment.pk: comment for comment in RunLineComment.objects.all()}
    assert (by_id[named.pk].addressed, by_id[named.pk].reply) == (
        LineCommentAddressed.EXPLAINED,
        "add is what the callers import.",
    )
    assert by_id[summed.pk].addressed == LineCommentAddressed.CHANGED
    # The marker is the Coder's word to the person, not part of the commit's message.
    assert git(repo_root, "log", "-1", "--format=%B", run.branch).endswith("Swapped them.")
