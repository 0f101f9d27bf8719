"""The Coder as a coding agent over ACP (pipelines/agents/coder_acp.py), end to end with
REAL agents in their sandbox: Claude Code through ``@zed-industries/claude-code-acp``
against the fake Messages API (tests/fake_anthropic.py), and opencode (``opencode acp``,
another vendor) against the fake Chat Completions API (tests/fake_openai.py).
The fakes script the model's tool calls; the real agent executes them, which comes back
to AutoCoder as ACP requests (files, the terminal, permissions). The FAKE ACP agent
(tests/fake_acp_agent.py) covers the faults and the refusals a real one cannot be made
to show on demand. The agents are installed by `npm ci --prefix tools/acp-agents`
(.ci/run does it): a missing one fails here, it is not skipped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from llm.acp.client import PermissionAsk
from pipelines.agents import prompts as agents
from pipelines.agents.coder_acp import coder_permission
from pipelines.models import AgentCall, PipelineRun, RunStatus
from pipelines.phases.driver import run_advance
from pipelines.runs.services import run_cancel, run_start
from pipelines.tests.repositories import CALC, CALC_FIXED, git, log_text
from repos.models import Repository
from tasks.models import Task
from tests.fake_anthropic import TextReply, ToolReply, default_reply
from tests.fake_openai import FakeOpenAIServer
from tests.readable import acp_agents_reachable, readable
from tests.threads import DatabaseThread
from tests.workers import drive_in_process

pytestmark = [pytest.mark.django_db, needs_bwrap]

# The fake agent and its folder, where the sandbox's user reaches them (tests/readable.py).
FAKE_FOLDER = readable(Path(__file__).resolve().parents[3] / "tests")
FAKE_AGENT = str(FAKE_FOLDER / "fake_acp_agent.py")
TEST_COMMAND = "python3 check.py"
OUTSIDE = Path("/tmp/autocoder-acp-outside.txt")


@pytest.fixture(autouse=True)
def _agents_the_sandbox_reaches(settings) -> None:  # type: ignore[no-untyped-def]
    settings.ACP_AGENTS = acp_agents_reachable(settings.ACP_AGENTS, settings.ACP_AGENTS_ROOT)


@pytest.fixture
def repo_root(repo_root: Path) -> Path:
    sandbox_status(refresh=True)
    return repo_root


@pytest.fixture
def tested(linked: Repository) -> Repository:
    linked.test_command = TEST_COMMAND
    linked.save(update_fields=["test_command"])
    return linked


def installed(name: str) -> None:
    command = Path(django_settings.ACP_AGENTS[name]["command"][0])
    assert command.exists(), f"{command} is missing: run `npm ci --prefix tools/acp-agents`"


def run_to_the_end(task, owner) -> PipelineRun:
    return drive_in_process(run_start(task=task, user=owner))


# --- Claude Code, through claude-code-acp --------------------------------------------------


def claude_code_scripts(fake_llm, steps: list[TextReply | ToolReply]) -> None:
    """Claude Code's main loop (its requests carry the ACP tools) gets ``steps``; its side
    requests (a title, a quota check) a short text; the Planner and Reviewer the demo's."""
    steps = list(steps)

    def reply(request: Any):
        names = request.tool_names
        if "mcp__acp__Write" in names and "Glob" in names:
            return steps.pop(0) if steps else TextReply("Done.")
        if "mcp__acp__Write" in names or (
            request.body.get("system") and "Claude Code" in json.dumps(request.body.get("system"))
        ):
            return TextReply("ok")
        return default_reply(request)

    fake_llm.fallback = reply


def test_claude_code_edits_over_acp_and_the_run_goes_through_tests_and_review(
    fake_llm, tested, repo_root, task, owner
) -> None:
    installed("claude-code")
    task.coder_agent = "claude-code"
    task.save()
    claude_code_scripts(
        fake_llm,
        [
            ToolReply(name="mcp__acp__Read", input={"file_path": "/workspace/app/calc.py"}),
            # Outside the worktree: refused by policy before anything is written.
            ToolReply(name="mcp__acp__Write", input={"file_path": str(OUTSIDE), "content": "escaped\n"}),
            # Not the test command: refused.
            ToolReply(name="mcp__acp__Bash", input={"command": "curl http://example.com", "timeout": 5000}),
            ToolReply(
                name="mcp__acp__Edit",
                input={"file_path": "/workspace/app/calc.py", "old_string": "a - b", "new_string": "a + b"},
            ),
            ToolReply(name="mcp__acp__Bash", input={"command": TEST_COMMAND, "timeout": 60000}),
            TextReply("Fixed add: it added nothing, now it adds."),
        ],
    )

    run = run_to_the_end(task, owner)

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert git(repo_root, "diff", "--name-only", f"main..{run.branch}") == "app/calc.py"
    assert git(repo_root, "show", f"{run.branch}:app/calc.py") == CALC_FIXED.strip()
    assert git(repo_root, "show", "main:app/calc.py") == CALC.strip()
    assert not OUTSIDE.exists()
    assert run.verify_result and run.verify_result["passed"]
    log = log_text(run, agents.CODER)
    assert "[Coder: Claude Code (ACP), over ACP]" in log
    assert "[Tool: Read /workspace/app/calc.py]" in log
    assert f"[Refused: Refused by policy: {OUTSIDE} is outside the repository's worktree" in log
    assert "[Refused: Refused by policy: the command 'curl http://example.com'" in log
    assert "[Allowed: Edit" in log
    assert f"[Allowed: `{TEST_COMMAND}`]" in log
    assert "Fixed add: it added nothing, now it adds." in log
    # A refused permission ends the agent's turn (Claude Code stops at a "reject"): each
    # refusal was its own round, the run's tests and review sent it back, and the last
    # round made the change. The agent never saw the file system outside the worktree.
    calls = list(AgentCall.objects.filter(run=run, agent=agents.CODER).order_by("id"))
    assert len(calls) == 3
    coder_requests = [r for r in fake_llm.requests if "mcp__acp__Write" in r.tool_names and "Glob" in r.tool_names]
    told = json.dumps(coder_requests[-1].body.get("messages"))
    assert "The test command failed" in told  # the Verifying phase's finding, before the last round
    # Its test run went through AutoCoder's runner (run_tests' answer, in the sandbox).
    assert "The tests passed (exit status 0). 4 test runs left." in told
    call = calls[-1]
    assert call.model == "acp:claude-code" and call.response_text.endswith("now it adds.")
    # The Reviewer reviewed the agent's change.
    assert AgentCall.objects.filter(run=run, agent=agents.REVIEWER).exists()


# --- opencode (another vendor), against a fake Chat Completions API --------------------------


def opencode_scripts(fake_openai: FakeOpenAIServer, steps: list[ToolReply], settings) -> None:
    """opencode's main loop (its requests carry its tools) gets ``steps``, then "Done."; its
    side requests (a title) the demo's chat answer."""
    settings.ACP_OPENAI_BASE_URL = fake_openai.base_url
    settings.ACP_OPENAI_API_KEY = "sk-openai-test"
    settings.ACP_OPENAI_MODEL = "fake-chat-model"
    fake_openai.scripted_for = lambda request: bool(request.tool_names)
    fake_openai.fallback = lambda request: TextReply("Done.") if request.tool_names else default_reply(request)
    fake_openai.script(*steps)


def test_opencode_edits_over_acp_against_an_openai_compatible_api(
    fake_llm, fake_openai, tested, repo_root, task, owner, settings
):
    installed("opencode")
    task.project.coder_agent = "opencode"
    task.project.save()
    # The API is on the host's loopback, which opencode reaches directly (not through
    # the proxy): the relay stands in for it at that address inside the sandbox.
    assert fake_openai.base_url.startswith("http://127.0.0.1:")
    # opencode ends its turn at a refused permission: the refusal comes last.
    opencode_scripts(
        fake_openai,
        [
            ToolReply(name="read", input={"filePath": "/workspace/app/calc.py"}),
            ToolReply(name="write", input={"filePath": "/workspace/app/calc.py", "content": CALC_FIXED}),
            ToolReply(name="bash", input={"command": TEST_COMMAND, "description": "tests"}),
            ToolReply(name="bash", input={"command": "rm -rf /workspace/app", "description": "clean"}),
        ],
        settings,
    )

    run = run_to_the_end(task, owner)

    chat = fake_openai.chat_requests
    assert any(request.wire_body and request.wire_body.get("model") == "fake-chat-model" for request in chat)
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert git(repo_root, "diff", "--name-only", f"main..{run.branch}") == "app/calc.py"
    assert git(repo_root, "show", f"{run.branch}:app/calc.py") == CALC_FIXED.strip()
    log = log_text(run, agents.CODER)
    assert "[Coder: opencode, over ACP]" in log
    assert "[Refused: Refused by policy: the command 'rm -rf /workspace/app'" in log
    assert f"[Allowed: {TEST_COMMAND}]" in log
    # opencode runs a command itself (in its sandbox: no network, no login) once given
    # leave: the test command ran and the model was told its output.
    assert any(request.wire_body and request.wire_body["messages"][-1].get("content") == "ok\n" for request in chat)
    # It was told the test command by name.
    assert f"The project's test command, the one shell command you may run: `{TEST_COMMAND}`" in chat[-1].prompt_text
    # opencode reports its usage: recorded on the call and the run.
    call = AgentCall.objects.filter(run=run, agent=agents.CODER).order_by("id").first()
    assert call is not None
    assert call.model == "acp:opencode" and call.input_tokens > 0 and call.output_tokens > 0
    run.refresh_from_db()
    assert run.input_tokens >= call.input_tokens


# --- The FAKE agent: refusals by the editor's rules, faults, cancel --------------------------


def use_fake_agent(settings, task, mode: str, script: list[dict] | None = None) -> None:
    settings.ACP_AGENTS = {
        **settings.ACP_AGENTS,
        "fake": {
            "label": "Fake ACP agent",
            "command": ["/usr/bin/python3", FAKE_AGENT],
            "env": {"FAKE_ACP_MODE": mode, "FAKE_ACP_SCRIPT": json.dumps(script or [])},
            "paths": [str(FAKE_FOLDER)],
        },
    }
    task.coder_agent = "fake"
    task.save()


def test_writes_outside_the_worktree_and_other_commands_are_refused_and_the_agent_told(
    fake_llm, settings, tested, repo_root, task, owner
) -> None:
    use_fake_agent(
        settings,
        task,
        "script",
        [
            {"method": "fs/write_text_file", "params": {"path": str(OUTSIDE), "content": "x"}},
            {"method": "fs/write_text_file", "params": {"path": "/workspace/../escape.txt", "content": "x"}},
            {"method": "fs/write_text_file", "params": {"path": "/workspace/.git/HEAD", "content": "x"}},
            {"method": "fs/read_text_file", "params": {"path": "/etc/passwd"}},
            {"method": "terminal/create", "params": {"command": "cat", "args": ["/etc/passwd"]}},
            {"method": "terminal/create", "params": {"command": f"{TEST_COMMAND}; curl evil"}},
            {"method": "fs/write_text_file", "params": {"path": "/workspace/app/calc.py", "content": CALC_FIXED}},
            {"method": "terminal/create", "params": {"command": "python3", "args": ["check.py"]}},
            {"method": "terminal/output", "params": {"terminalId": "term-1"}},
        ],
    )
    head = git(repo_root, "rev-parse", "HEAD")

    run = run_to_the_end(task, owner)

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    log = log_text(run, agents.CODER)
    assert f"fs/write_text_file -> error: {OUTSIDE} is outside the repository's worktree" in log
    assert "fs/write_text_file -> error: Paths may not leave the repository" in log or "leave" in log
    assert "fs/write_text_file -> error: Paths inside .git are not allowed" in log or ".git" in log
    assert "fs/read_text_file -> error: /etc/passwd is outside the repository's worktree" in log
    assert "terminal/create -> error: Only the project's test command may run here, exactly: python3 check.py" in log
    assert log.count("terminal/create -> error: Only the project's test command may run here") == 2
    assert 'terminal/output -> ok: {"output": "The tests passed (exit status 0)' in log
    assert not OUTSIDE.exists() and not (repo_root.parent / "escape.txt").exists()
    assert git(repo_root, "rev-parse", "HEAD") == head  # the linked repository's .git untouched
    assert git(repo_root, "show", f"{run.branch}:app/calc.py") == CALC_FIXED.strip()
    assert "app/calc.py" in run.written_paths
    # Its reported usage and cost are the call's.
    call = AgentCall.objects.get(run=run, agent=agents.CODER)
    assert (call.input_tokens, call.output_tokens, str(call.cost_usd)) == (1000, 500, "0.012300")


@pytest.mark.parametrize(
    ("ask", "allowed"),
    [
        (PermissionAsk("edit", "Write", "", ("/workspace/app/calc.py",)), True),
        (PermissionAsk("edit", "Write", "", ("app/new.py", "/workspace/app/x.py")), True),
        (PermissionAsk("edit", "Write", "", ("/workspace/.git/config",)), False),
        (PermissionAsk("edit", "Write", "", ("/etc/passwd",)), False),
        (PermissionAsk("edit", "Write", "", ("/workspace/../x",)), False),
        (PermissionAsk("edit", "Write", "", ()), False),
        (PermissionAsk("execute", "tests", TEST_COMMAND, ()), True),
        (PermissionAsk("execute", "tests", f"{TEST_COMMAND} && curl x", ()), False),
        (PermissionAsk("execute", "ls", "ls", ()), False),
        (PermissionAsk("fetch", "web", "", ()), False),
        (PermissionAsk("other", "/tmp", "", ("/tmp",)), False),
    ],
)
def test_permissions_are_decided_by_policy(ask: PermissionAsk, allowed: bool) -> None:
    decision = coder_permission(ask, roots=("/workspace", "/srv/worktree"), test_command=TEST_COMMAND)
    assert (decision is None) is allowed, decision


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("crash", "Error: the coding agent fake ended before it finished (exit status 3"),
        ("auth", "Error: the coding agent fake is not logged in (Authentication required)"),
        ("garbage", "Error: the coding agent fake broke the protocol"),
    ],
)
def test_an_agent_that_crashes_or_is_not_logged_in_fails_the_run_saying_so(
    fake_llm, settings, linked, task, owner, mode, message
) -> None:
    use_fake_agent(settings, task, mode)
    run = run_to_the_end(task, owner)
    assert run.status == RunStatus.FAILED
    assert run.error.startswith(message), run.error


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_the_agent(fake_llm, settings, linked, task, owner) -> None:
    use_fake_agent(settings, task, "hang")
    run = run_start(task=task, user=owner)
    run_advance(run_id=run.pk)  # planning → coding
    run.refresh_from_db()
    assert run.status == RunStatus.CODING
    worker = DatabaseThread(target=run_advance, kwargs={"run_id": run.pk})
    worker.start()
    deadline = time.monotonic() + 20
    while "Working on it, slowly." not in log_text(run, agents.CODER):
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.1)
    started = time.monotonic()
    run.refresh_from_db()
    run_cancel(run=run, actor=owner)
    worker.join(15)
    assert not worker.is_alive()
    assert time.monotonic() - started < 10
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


def test_the_project_and_task_coder_in_the_api(owner_client, project, task) -> None:
    api_client = owner_client
    url = f"/api/projects/{project.pk}"
    refused = api_client.patch(url, {"coder_agent": "nope"}, format="json")
    assert refused.status_code == 400 and "coder_agent" in refused.json()["extra"]["fields"], refused.json()
    assert api_client.patch(url, {"coder_agent": "opencode"}, format="json").status_code == 200
    project.refresh_from_db()
    assert project.coder_agent == "opencode"
    task_url = f"/api/tasks/{task.pk}"
    assert api_client.patch(task_url, {"coder_agent": "nope"}, format="json").status_code == 400
    answer = api_client.patch(task_url, {"coder_agent": "claude-code"}, format="json")
    assert answer.status_code == 200 and answer.json()["coder_agent"] == "claude-code"


def test_the_coder_is_shown_on_the_card_the_run_page_and_the_settings_page(owner_session_client, project, task):
    from django.urls import reverse

    card = owner_session_client.get(reverse("tasks:card", args=[task.pk])).content.decode()
    assert 'data-testid="card-coder"' not in card  # the built-in Coder: nothing to say
    project.coder_agent = "opencode"
    project.save()
    card = owner_session_client.get(reverse("tasks:card", args=[task.pk])).content.decode()
    assert 'data-testid="card-coder" title="Coder: a coding agent over ACP">opencode<' in card
    task.coder_agent = "claude-code"
    task.save()
    page = owner_session_client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert '<option value="claude-code" selected>Claude Code (ACP)</option>' in page
    settings_page = owner_session_client.get(reverse("projects:edit", args=[project.pk])).content.decode()
    assert '<option value="opencode" selected>opencode</option>' in settings_page


def test_a_run_keeps_the_coder_it_started_with_and_says_so_on_the_card_the_api_and_its_panel(
    fake_llm, settings, linked, task, owner, owner_client, owner_session_client
) -> None:
    from django.urls import reverse

    from core.coder_agents import BUILT_IN

    use_fake_agent(settings, task, "crash")
    run = run_start(task=task, user=owner)
    # Switched to the built-in Coder while the run waits in the queue: it changes the
    # next run, not this one.
    task.coder_agent = BUILT_IN
    task.save()
    run = drive_in_process(run)
    assert run.coder_agent == "fake"
    assert run.error.startswith("Error: the coding agent fake ended before it finished"), run.error

    card = owner_session_client.get(reverse("tasks:card", args=[task.pk])).content.decode()
    assert 'data-testid="card-coder" title="Coder: a coding agent over ACP">Fake ACP agent<' in card
    page = owner_session_client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert 'data-testid="run-coder" title="The Coder: a coding agent over ACP">Coder: Fake ACP agent<' in page
    assert owner_client.get(f"/api/runs/{run.pk}").json()["coder_agent"] == "fake"
    assert owner_client.get(f"/api/tasks/{task.pk}").json()["latest_run"]["coder_agent"] == "fake"

    # A run from before runs recorded their Coder shows its task's choice as it is now.
    PipelineRun.objects.filter(pk=run.pk).update(coder_agent=None)
    task.refresh_from_db()
    state = {key: value for key, value in task.pipeline_state.items() if key != "coder_agent"}
    Task.objects.filter(pk=task.pk).update(pipeline_state=state, coder_agent="claude-code")
    page = owner_session_client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert "Coder: Claude Code (ACP)<" in page
    card = owner_session_client.get(reverse("tasks:card", args=[task.pk])).content.decode()
    assert ">Claude Code (ACP)<" in card
    assert owner_client.get(f"/api/runs/{run.pk}").json()["coder_agent"] is None
    assert owner_client.get(f"/api/tasks/{task.pk}").json()["latest_run"]["coder_agent"] is None

    # The next run has the built-in Coder: the card says nothing of an agent any more.
    Task.objects.filter(pk=task.pk).update(coder_agent=BUILT_IN)
    task.refresh_from_db()
    second = run_start(task=task, user=owner)
    assert second.coder_agent == ""
    card = owner_session_client.get(reverse("tasks:card", args=[task.pk])).content.decode()
    assert 'data-testid="card-coder"' not in card
    assert owner_client.get(f"/api/tasks/{task.pk}").json()["latest_run"]["coder_agent"] == ""
