"""The Claude CLI provider's one-shot answers (Planner, Reviewer…) with the REAL CLI
(tools/claude-cli, pinned) talking to the fake Messages API (tests/fake_anthropic.py)
through its sandbox's relay. Tests named ``test_fake_cli_…`` use tests/bin/claude for
what the real CLI cannot be made to do (exit without a result, print no JSON)."""

from __future__ import annotations

import threading
import time

import pytest

from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from llm.providers import claude_cli, provider_for
from llm.providers.base import Cancelled, LLMRequest, ProviderError
from llm.providers.claude_cli import ClaudeCliProvider
from llm.providers.claude_cli_events import NOT_LOGGED_IN
from pipelines.agents.prompts import PLAN_TOOL, REVIEW_TOOL
from tests.fake_anthropic import FakeAnthropicServer, Hang, HttpError
from tests.fake_claude import fake_claude
from tests.real_claude import real_claude

# Every call of the CLI runs in the sandbox (llm/providers/claude_cli_sandbox.py).
pytestmark = needs_bwrap

CLAUDE = real_claude()
FAKE_CLAUDE = fake_claude()
KEY = "sk-ant-api03-the-servers-configured-key"


@pytest.fixture(autouse=True)
def _sandbox(tmp_path, settings, monkeypatch) -> None:
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    # The server's account has no login of the CLI's own: only what the settings give.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CLAUDE_CODE_OAUTH_TOKEN", raising=False)
    sandbox_status(refresh=True)


@pytest.fixture
def cli(fake_llm: FakeAnthropicServer, settings) -> ClaudeCliProvider:
    """The provider as the server builds it for LLM_PROVIDER=claude-cli."""
    settings.LLM_PROVIDER = "claude-cli"
    settings.CLAUDE_CLI_PATH = CLAUDE
    settings.CLAUDE_CLI_TIMEOUT_SECONDS = 60
    settings.ANTHROPIC_API_KEY = KEY
    provider = provider_for()
    assert isinstance(provider, ClaudeCliProvider)
    return provider


def _request(prompt: str = "Plan it", tool=PLAN_TOOL) -> LLMRequest:
    return LLMRequest(
        system="You plan AutoCoder's tasks.",
        messages=[{"role": "user", "content": prompt}],
        model="claude-x",
        max_tokens=100,
        tool=tool,
    )


def _complete(provider: ClaudeCliProvider, request: LLMRequest | None = None, cancel=lambda: False, log=None):
    sink = log if log is not None else []
    return provider.complete(request or _request(), on_chunk=sink.append, should_cancel=cancel)


def test_the_answer_is_the_clis_structured_output_with_the_servers_key_and_api(cli, fake_llm) -> None:
    result = _complete(cli)

    assert result.tool_input is not None and [s["title"] for s in result.tool_input["subtasks"]] == [
        "Write the change",
        "Cover it with a test",
    ]
    assert result.stop_reason == "success" and result.input_tokens + result.all_input_tokens > 0
    first = fake_llm.requests[0]
    # The server's key and base URL reached the CLI (through its relay, to this server).
    assert {name.lower(): value for name, value in first.headers.items()}.get("x-api-key") == KEY
    # AutoCoder's own system prompt replaced the CLI's (~7,600 tokens): a few lines.
    assert "You plan AutoCoder's tasks." in first.system_text and len(first.system_text) < 2000
    # The schema as --json-schema (its title names the agent's tool); no other tool.
    assert first.structured_output_schema["title"] == "submit_plan"
    assert set(first.tool_names) <= {"StructuredOutput", "DeferredToolPlaceholder"}


def test_the_review_answer_and_the_conversation_so_far(cli, fake_llm) -> None:
    request = _request(tool=REVIEW_TOOL)
    request.messages = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "Review it"},
    ]
    result = _complete(cli, request)
    assert result.tool_input == {"pass": True, "findings": []}
    sent = fake_llm.requests[0].message_texts[0]
    assert "The conversation so far:\n\nUser: What is 2 + 2?\n\nAssistant: 4.\n\nReview it" in sent


def test_a_200_kb_prompt_goes_on_stdin(cli, fake_llm) -> None:
    prompt = "Plan it.\n" + ("# a long diff line of the branch under review\n" * 4600)
    assert len(prompt) > 200_000
    result = _complete(cli, _request(prompt))
    assert result.tool_input is not None
    assert fake_llm.requests[0].message_texts[0].count("a long diff line") == 4600


def test_an_overloaded_api_shows_the_clis_retries_in_the_log(cli, fake_llm) -> None:
    fake_llm.script(HttpError(529, "overloaded_error", "Overloaded"), HttpError(529, "overloaded_error", "Overloaded"))
    log: list[str] = []
    result = _complete(cli, log=log)
    assert result.tool_input is not None and result.extra["api_retries"] == 2
    text = "".join(log)
    assert "[The API is busy (529 overloaded): the Claude CLI retries, attempt 1 of 10" in text
    assert "attempt 2 of 10" in text


def test_not_logged_in_is_said_clearly(cli, settings) -> None:
    settings.ANTHROPIC_API_KEY = ""
    with pytest.raises(ProviderError) as excinfo:
        _complete(provider_for())
    assert excinfo.value.message == NOT_LOGGED_IN
    assert excinfo.value.retryable is False


def test_an_api_error_is_the_results_message_briefly(cli, fake_llm) -> None:
    fake_llm.script(HttpError(400, "invalid_request_error", "prompt is too long: 1 tokens > 0 maximum"))
    with pytest.raises(ProviderError) as excinfo:
        _complete(cli)
    message = excinfo.value.message
    assert message.startswith("Error: the Claude CLI failed") and "prompt is too long" in message.lower()
    assert "{" not in message and len(message) < 400  # not the whole JSON result


def test_timeout_kills_the_child(cli, fake_llm) -> None:
    fake_llm.script(Hang(20))
    cli.timeout = 3
    started = time.monotonic()
    with pytest.raises(ProviderError) as excinfo:
        _complete(cli)
    assert time.monotonic() - started < 8
    assert excinfo.value.message == "Error: the Claude CLI did not finish within 3 s and was stopped."
    assert excinfo.value.retryable is True
    fake_llm.reset()


def test_cancel_kills_the_child(cli, fake_llm) -> None:
    fake_llm.script(Hang(20))
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        _complete(cli, cancel=cancel.is_set)
    assert time.monotonic() - started < 4
    fake_llm.reset()


def test_missing_executable() -> None:
    with pytest.raises(ProviderError) as excinfo:
        _complete(ClaudeCliProvider(executable="/nonexistent/claude"))
    assert excinfo.value.message.startswith("Error: the Claude CLI")


# --- Faults the real CLI cannot be made to produce: the fake CLI -------------------------


@pytest.fixture
def fake_modes(monkeypatch) -> None:
    # The provider passes the CLI only an allow-list of variables; the fake's are added.
    monkeypatch.setattr(claude_cli, "CLI_ENVIRONMENT", claude_cli.CLI_ENVIRONMENT | {"FAKE_CLAUDE_MODE"})


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # A CLI that dies before its result (killed, a broken install): its stderr.
        ("fail", "Error: the Claude CLI exited with 2: authentication required: run claude login"),
        ("garbage", "Error: the Claude CLI exited with 0: no result"),
    ],
)
def test_fake_cli_without_a_result_is_an_error_with_its_exit(fake_modes, monkeypatch, mode: str, expected: str) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_MODE", mode)
    with pytest.raises(ProviderError) as excinfo:
        _complete(ClaudeCliProvider(executable=FAKE_CLAUDE))
    assert excinfo.value.message == expected


def test_fake_cli_sees_nothing_of_the_servers_environment_but_its_key(fake_modes, monkeypatch) -> None:
    """What reaches the CLI's process (the real one shows no environment to a test)."""
    import json

    monkeypatch.setenv("FAKE_CLAUDE_MODE", "record")
    monkeypatch.setenv("SECRET_KEY", "do-not-leak-this-secret-key-value-0123456789")
    monkeypatch.setenv("REDIS_URL", "redis://:password@redis:6379/0")
    provider = ClaudeCliProvider(executable=FAKE_CLAUDE, api_key=KEY, base_url="http://127.0.0.1:9")
    recorded = json.loads(_complete(provider).text)
    assert recorded["cwd"] == "/workspace"
    assert "SECRET_KEY" not in recorded["env"] and "REDIS_URL" not in recorded["env"]
    assert {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "PYTHONDONTWRITEBYTECODE"} <= set(recorded["env"])
    argv = recorded["argv"]
    assert argv[argv.index("--tools") + 1] == "" and "--strict-mcp-config" in argv
    assert argv[argv.index("--system-prompt-file") + 1] == "autocoder-system-prompt.md"
