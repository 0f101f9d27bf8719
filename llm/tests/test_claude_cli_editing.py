"""The Claude CLI provider's editing agent (a request with a ``worktree``): the
sandboxed child, its stream-json events, its login copy, its failures. The fake CLI is
tests/bin/claude; the whole runs are in pipelines/tests/agents/test_coder_cli.py."""

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
from tests.fake_claude import fake_claude

FAKE_CLAUDE = fake_claude()


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


@needs_bwrap
def test_the_agent_edits_in_the_sandbox_and_its_events_stream(worktree: Path) -> None:
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
def test_the_agent_gets_its_login_as_far_as_it_needs_it_and_nothing_else_of_its_config(
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
def test_a_failing_cli_is_a_provider_error_with_its_message(worktree: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "fail")
    with pytest.raises(ProviderError) as excinfo:
        _edit(ClaudeCliProvider(executable=FAKE_CLAUDE), _request(worktree))
    assert excinfo.value.message == "Error: the Claude CLI exited with 2: authentication required: run claude login"
    assert excinfo.value.retryable is False


@needs_bwrap
def test_out_of_turns_is_a_result_not_an_error(worktree: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "max_turns")
    result = _edit(ClaudeCliProvider(executable=FAKE_CLAUDE), _request(worktree))
    assert result.stop_reason == "error_max_turns"
    assert (worktree / "hello.py").exists()


@needs_bwrap
def test_the_timeout_kills_the_agent(worktree: Path, monkeypatch) -> None:
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
