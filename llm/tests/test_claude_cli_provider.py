from __future__ import annotations

import json
import threading
import time

import pytest

from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from llm.providers import claude_cli
from llm.providers.base import Cancelled, LLMRequest, ProviderError
from llm.providers.claude_cli import ClaudeCliProvider
from pipelines.agents.prompts import PLAN_TOOL
from tests.fake_claude import fake_claude

# Every call of the CLI runs in the sandbox (llm/providers/claude_cli_sandbox.py).
pytestmark = needs_bwrap

FAKE_CLAUDE = fake_claude()


@pytest.fixture(autouse=True)
def _sandbox(tmp_path, settings) -> None:
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    sandbox_status(refresh=True)


@pytest.fixture(autouse=True)
def _fake_cli_sees_its_settings(monkeypatch) -> None:
    # The provider passes the CLI only an allow-list of variables; the fake's are added.
    monkeypatch.setattr(
        claude_cli, "CLI_ENVIRONMENT", claude_cli.CLI_ENVIRONMENT | {"FAKE_CLAUDE_MODE", "FAKE_CLAUDE_ARGV_FILE"}
    )


def _request(**kwargs) -> LLMRequest:
    return LLMRequest(
        system="You plan.",
        messages=[{"role": "user", "content": "Plan it"}],
        model="claude-x",
        max_tokens=100,
        tool=PLAN_TOOL,
        **kwargs,
    )


def _complete(provider: ClaudeCliProvider, request: LLMRequest | None = None, cancel=lambda: False):
    return provider.complete(request or _request(), on_chunk=lambda c: None, should_cancel=cancel)


def test_json_result_becomes_tool_input(monkeypatch) -> None:
    result = _complete(ClaudeCliProvider(executable=FAKE_CLAUDE))
    assert result.tool_input == {"subtasks": [{"id": "s1", "title": "Do it", "description": "d", "order": 1}]}
    assert (result.input_tokens, result.output_tokens) == (12, 34)
    assert (result.cache_creation_input_tokens, result.cache_read_input_tokens) == (0, 0)
    assert result.extra["session_id"] == "sess-123"


def test_the_cli_gets_no_tools_and_nothing_of_the_servers(monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "record")
    monkeypatch.setenv("SECRET_KEY", "do-not-leak-this-secret-key-value-0123456789")
    monkeypatch.setenv("REDIS_URL", "redis://:password@redis:6379/0")
    conversation = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "Plan it"},
    ]
    request = _request(resume_session="sess-9")
    request.messages = conversation
    result = _complete(ClaudeCliProvider(executable=FAKE_CLAUDE), request)
    recorded = json.loads(result.text)
    argv = recorded["argv"]
    # The prompt on stdin (it can outgrow an argument; the process list is public).
    assert argv[:3] == ["-p", "--output-format", "json"] and "submit_plan" in recorded["prompt"]
    # Its sessions do not outlive a call (a config folder of its own): the conversation is
    # in the prompt instead of --resume.
    assert "--resume" not in argv
    assert "The conversation so far:\n\nUser: What is 2 + 2?\n\nAssistant: 4.\n\nPlan it" in recorded["prompt"]
    # No tools (it would read files), in an empty folder of its sandbox, with no server settings.
    assert argv[argv.index("--tools") + 1] == "" and "--strict-mcp-config" in argv
    assert recorded["cwd"] == "/workspace"
    assert "SECRET_KEY" not in recorded["env"] and "REDIS_URL" not in recorded["env"]
    assert "DJANGO_SETTINGS_MODULE" not in recorded["env"]


def test_timeout_kills_the_child(monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "hang")
    started = time.monotonic()
    with pytest.raises(ProviderError) as excinfo:
        _complete(ClaudeCliProvider(executable=FAKE_CLAUDE, timeout=0.5))
    assert time.monotonic() - started < 3
    assert excinfo.value.message.startswith("Error: ")
    assert excinfo.value.retryable is True


def test_cancel_kills_the_child(monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "hang")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        _complete(ClaudeCliProvider(executable=FAKE_CLAUDE, timeout=60), cancel=cancel.is_set)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("fail", "Error: the Claude CLI exited with 2: authentication required: run claude login"),
        ("garbage", "Error: the Claude CLI printed something that is not JSON."),
        ("error", "Error: model overloaded"),
    ],
)
def test_failures_come_back_as_text_starting_with_error(monkeypatch, mode: str, expected: str) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_MODE", mode)
    with pytest.raises(ProviderError) as excinfo:
        _complete(ClaudeCliProvider(executable=FAKE_CLAUDE))
    assert excinfo.value.message == expected


def test_missing_executable() -> None:
    with pytest.raises(ProviderError) as excinfo:
        _complete(ClaudeCliProvider(executable="/nonexistent/claude"))
    assert excinfo.value.message.startswith("Error: the Claude CLI")


def test_cache_usage_is_read_from_the_json_result(monkeypatch) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "cached")
    result = _complete(ClaudeCliProvider(executable=FAKE_CLAUDE))
    assert (result.input_tokens, result.cache_creation_input_tokens, result.cache_read_input_tokens) == (12, 56, 78)
    assert result.all_input_tokens == 146
