"""The Claude CLI provider's editing agent (a request with a ``worktree``): the
sandboxed child, its stream-json events, its API retries, its login copy, its failures.

The first tests run the REAL CLI (tools/claude-cli) against the fake Messages API; those
named ``test_fake_cli_…`` use tests/bin/claude for what the real one cannot be made to
do or show (die without a result, report its own environment and config folder, loop
forever in the worktree). The whole runs are in pipelines/tests/agents/test_coder_cli.py."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest

from core.exceptions import SandboxUnavailable
from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from llm.providers import claude_cli
from llm.providers.base import LLMRequest, ProviderError
from llm.providers.claude_cli import ClaudeCliProvider
from tests.fake_anthropic import FakeAnthropicServer, HttpError, TextReply, ToolReply
from tests.fake_claude import fake_claude
from tests.real_claude import real_claude

FAKE_CLAUDE = fake_claude()
CLAUDE = real_claude()


@pytest.fixture(autouse=True)
def _fake_cli_sees_its_settings(monkeypatch) -> None:
    fake = {"FAKE_CLAUDE_MODE", "FAKE_CLAUDE_EDIT_MODE", "FAKE_CLAUDE_EDITS"}
    monkeypatch.setattr(claude_cli, "CLI_ENVIRONMENT", claude_cli.CLI_ENVIRONMENT | fake)


@pytest.fixture
def worktree(tmp_path: Path, settings) -> Path:
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    folder = tmp_path / "worktrees" / "task-1-run-1"
    folder.mkdir(parents=True)
    sandbox_status(refresh=True)
    return folder


def _request(worktree: Path, **kwargs) -> LLMRequest:
    return LLMRequest(
        system="You code.",
        messages=[{"role": "user", "content": "Add hello.py"}],
        model="claude-sonnet-4-5",
        max_tokens=100,
        worktree=str(worktree),
        max_turns=5,
        **kwargs,
    )


def _edit(provider: ClaudeCliProvider, request: LLMRequest, chunks: list[str] | None = None):
    sink = chunks if chunks is not None else []
    return provider.complete(request, on_chunk=sink.append, should_cancel=lambda: False)


@pytest.fixture
def real(fake_llm: FakeAnthropicServer) -> ClaudeCliProvider:
    """The real CLI, logged in with the configured key, talking to the fake API."""
    return ClaudeCliProvider(executable=CLAUDE, api_key="sk-ant-test-key", base_url=fake_llm.url, timeout=60)


@needs_bwrap
def test_the_real_agent_edits_in_the_sandbox_and_its_events_stream(
    worktree: Path, real: ClaudeCliProvider, fake_llm: FakeAnthropicServer
) -> None:
    fake_llm.script(
        ToolReply(
            name="Write", text="Writing it.\n", input={"file_path": "/workspace/hello.py", "content": "print(1)\n"}
        ),
        TextReply("Created hello.py."),
    )
    chunks: list[str] = []
    result = _edit(real, _request(worktree), chunks)

    assert (worktree / "hello.py").read_text() == "print(1)\n"
    assert result.text == "Created hello.py." and result.stop_reason == "success"
    assert result.extra["num_turns"] == 2 and result.input_tokens > 0 and result.reported_cost_usd
    assert [(call.name, call.input) for call in result.tool_calls] == [
        ("Write", {"file_path": "/workspace/hello.py", "content": "print(1)\n"})
    ]
    log = "".join(chunks)
    write = log.index('→ Write {"file_path": "/workspace/hello.py"')
    assert log.index("Writing it.") < write < log.index("  File created successfully at: /workspace/hello.py")


@needs_bwrap
def test_the_real_agents_api_retries_show_in_the_log(
    worktree: Path, real: ClaudeCliProvider, fake_llm: FakeAnthropicServer
) -> None:
    fake_llm.script(HttpError(529, "overloaded_error", "Overloaded"), TextReply("Nothing to do."))
    chunks: list[str] = []
    result = _edit(real, _request(worktree), chunks)
    assert result.text == "Nothing to do." and result.extra["api_retries"] == 1
    assert "[The API is busy (529 overloaded): the Claude CLI retries, attempt 1 of" in "".join(chunks)


@needs_bwrap
def test_the_real_agent_out_of_turns_is_a_result_not_an_error(
    worktree: Path, real: ClaudeCliProvider, fake_llm: FakeAnthropicServer
) -> None:
    fake_llm.script(
        ToolReply(name="Write", input={"file_path": "/workspace/a.py", "content": "a = 1\n"}),
        ToolReply(name="Write", input={"file_path": "/workspace/b.py", "content": "b = 1\n"}),
    )
    request = _request(worktree)
    request.max_turns = 1
    result = _edit(real, request)
    assert result.stop_reason == "error_max_turns"
    assert (worktree / "a.py").exists() and not (worktree / "b.py").exists()
    fake_llm.reset()


@needs_bwrap
def test_the_real_agent_not_logged_in_is_said_clearly(
    worktree: Path, fake_llm: FakeAnthropicServer, tmp_path: Path, monkeypatch
) -> None:
    from llm.providers.claude_cli_events import NOT_LOGGED_IN

    # No key configured, and the server's account has no login of the CLI's own.
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CLAUDE_CODE_OAUTH_TOKEN", raising=False)
    provider = ClaudeCliProvider(executable=CLAUDE, base_url=fake_llm.url, timeout=60)
    with pytest.raises(ProviderError) as excinfo:
        _edit(provider, _request(worktree))
    assert excinfo.value.message == NOT_LOGGED_IN
    assert list(worktree.iterdir()) == []


# --- The fake CLI: what the real one cannot be made to do or show -----------------------


@needs_bwrap
def test_fake_cli_usage_and_cost_are_read_from_its_result(worktree: Path) -> None:
    chunks: list[str] = []
    result = _edit(ClaudeCliProvider(executable=FAKE_CLAUDE), _request(worktree), chunks)

    assert (worktree / "hello.py").read_text() == "print(1)\n"
    assert result.text == "Created hello.py."
    assert result.stop_reason == "success" and result.extra["num_turns"] == 2
    assert (result.input_tokens, result.output_tokens) == (100, 200)
    assert (result.cache_creation_input_tokens, result.cache_read_input_tokens) == (300, 400)
    assert result.reported_cost_usd == pytest.approx(0.0421)
    assert [(call.name, call.input) for call in result.tool_calls] == [
        ("Write", {"file_path": "/workspace/hello.py", "content": "print(1)\n"})
    ]
    log = "".join(chunks)
    write = log.index('→ Write {"file_path": "/workspace/hello.py"')
    assert log.index("Editing for: Add hello.py") < write < log.index("  Wrote /workspace/hello.py")


@needs_bwrap
def test_fake_cli_gets_its_login_as_far_as_it_needs_it_and_nothing_else_of_its_config(
    worktree: Path, tmp_path: Path, monkeypatch
) -> None:
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    login = {"claudeAiOauth": {"accessToken": "t", "refreshToken": "refresh-stays-home"}}
    (home / ".claude" / ".credentials.json").write_text(json.dumps(login))
    (home / ".claude" / "projects" / "other.jsonl").write_text("someone else's session")
    state = {"oauthAccount": {"emailAddress": "ops@example.com"}, "projects": {"/srv/secret-repo": {}}}
    (home / ".claude.json").write_text(json.dumps(state))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "show_config")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    seen = json.loads(_edit(ClaudeCliProvider(executable=FAKE_CLAUDE), _request(worktree)).text)

    assert seen["home"] == "/home/sandbox" and seen["config"] == "/home/sandbox/.claude"
    # The access token in its environment only; no credentials file, no refresh token.
    assert seen["files"] == [".claude.json", "projects"]  # projects: this call's own transcript
    assert seen["login"] == ["CLAUDE_CODE_OAUTH_TOKEN"] and seen["oauth_token"] == "t"
    assert seen["account"] == {"oauthAccount": {"emailAddress": "ops@example.com"}, "hasCompletedOnboarding": True}
    assert not list(scratch.iterdir())  # the private config folder is gone afterwards
    assert [path.name for path in (home / ".claude" / "projects").iterdir()] == ["other.jsonl"]


@needs_bwrap
def test_fake_cli_dying_without_a_result_is_a_provider_error_with_its_stderr(worktree: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "fail")
    with pytest.raises(ProviderError) as excinfo:
        _edit(ClaudeCliProvider(executable=FAKE_CLAUDE), _request(worktree))
    assert excinfo.value.message == "Error: the Claude CLI exited with 2: authentication required: run claude login"
    assert excinfo.value.retryable is False


@needs_bwrap
def test_fake_cli_out_of_turns_exits_1_with_its_result(worktree: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "max_turns")
    result = _edit(ClaudeCliProvider(executable=FAKE_CLAUDE), _request(worktree))
    assert result.stop_reason == "error_max_turns"
    assert (worktree / "hello.py").exists()


@needs_bwrap
def test_fake_cli_looping_in_the_worktree_is_killed_at_the_timeout(worktree: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "hang")
    started = time.monotonic()
    with pytest.raises(ProviderError) as excinfo:
        _edit(ClaudeCliProvider(executable=FAKE_CLAUDE, timeout=1.5), _request(worktree))
    assert time.monotonic() - started < 10
    assert "did not finish within 1.5 s" in excinfo.value.message
    heartbeat = worktree / ".fake-claude-alive"
    size = heartbeat.stat().st_size
    time.sleep(0.4)
    assert heartbeat.stat().st_size == size


def test_without_a_sandbox_the_agent_does_not_start(worktree: Path, settings) -> None:
    settings.SANDBOX_BWRAP = "/nonexistent/bwrap"
    sandbox_status(refresh=True)
    with pytest.raises(SandboxUnavailable):
        _edit(ClaudeCliProvider(executable=FAKE_CLAUDE), _request(worktree))
    assert list(worktree.iterdir()) == []


def test_a_missing_cli_is_a_clear_error(worktree: Path) -> None:
    with pytest.raises(ProviderError) as excinfo:
        _edit(ClaudeCliProvider(executable="/nonexistent/claude"), _request(worktree))
    assert "is not installed or not on PATH" in excinfo.value.message


def test_the_real_agents_test_runs_write_no_bytecode_into_the_worktree(
    worktree: Path, real: ClaudeCliProvider, fake_llm: FakeAnthropicServer, settings
) -> None:
    """Unsandboxed (UNSAFE_RUN_TESTS_WITHOUT_SANDBOX) the worktree is the tests' own: an
    import there would leave ``__pycache__`` beside the module, for the commit to find."""
    settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = True
    sandbox_status(refresh=True)
    (worktree / "pkg").mkdir()
    (worktree / "pkg" / "__init__.py").write_text("")
    (worktree / "pkg" / "mod.py").write_text("VALUE = 1\n")
    fake_llm.script(
        ToolReply(name="Bash", input={"command": "autocoder-run-tests", "description": "Run the tests"}),
        TextReply("Tested."),
    )
    request = _request(worktree, allowed_commands=("python3 -c 'import pkg.mod; print(\"imported\")'",))
    chunks: list[str] = []
    _edit(real, request, chunks)

    assert "  imported" in "".join(chunks)
    assert not list(worktree.rglob("__pycache__")) and not list(worktree.rglob("*.pyc"))
