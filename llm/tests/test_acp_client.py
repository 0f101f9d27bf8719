"""The ACP client (llm/acp/client.py) and provider (llm/acp/provider.py) against a FAKE
ACP agent (tests/fake_acp_agent.py: a small Python program speaking ACP on stdio), for
what the real agents cannot be made to do on demand: crash, write garbage, refuse the
login, ignore a cancel. The real agents are driven end to end in
pipelines/tests/agents/test_coder_acp.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from core.tests.test_sandbox import needs_bwrap
from llm.acp import client as acp_client
from llm.acp.client import AcpRefused, CommandRun, PermissionAsk
from llm.acp.provider import AcpProvider, acp_agent
from llm.providers.base import Cancelled, LLMRequest, ProviderError
from tests.readable import readable

# The fake agent and its folder, where the sandbox's user reaches them (tests/readable.py).
FAKE_FOLDER = readable(Path(__file__).resolve().parents[2] / "tests")
FAKE_AGENT = str(FAKE_FOLDER / "fake_acp_agent.py")


class Host:
    """Answers like coder_acp's host would, recording what it was asked."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.asked: list[PermissionAsk] = []
        self.commands: list[str] = []

    def read_text(self, path: str, line: int | None, limit: int | None) -> str:
        if not path.startswith(str(self.root)):
            raise AcpRefused(f"{path} is outside")
        return (self.root / Path(path).name).read_text()

    def write_text(self, path: str, content: str) -> None:
        if not path.startswith(str(self.root)):
            raise AcpRefused(f"{path} is outside the worktree")
        (self.root / Path(path).name).write_text(content)

    def run_command(self, command: str, args: list[str]) -> CommandRun:
        self.commands.append(command)
        if command != "make test":
            raise AcpRefused("Only the test command may run")
        return CommandRun(output="3 passed\n", exit_code=0)

    def permit(self, ask: PermissionAsk) -> str | None:
        self.asked.append(ask)
        return None if ask.kind == "edit" else "Refused by policy"


def fake(settings, mode: str, script: list[dict] | None = None, python: str = sys.executable) -> None:
    settings.ACP_AGENTS = {
        "fake": {
            "command": [python, FAKE_AGENT],
            "api": "anthropic",
            "env": {"FAKE_ACP_MODE": mode, "FAKE_ACP_SCRIPT": json.dumps(script or [])},
            "paths": [str(FAKE_FOLDER)],
        }
    }
    settings.ANTHROPIC_API_KEY = "sk-test"
    settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:9"


def call(tmp_path: Path, *, sandboxed: bool = False, cancel=lambda: False, timeout: float = 30):
    host = Host(tmp_path)
    provider = AcpProvider(agent=acp_agent("fake"), host=host, api_key="", timeout=timeout, sandboxed=sandboxed)
    chunks: list[str] = []
    request = LLMRequest(
        system="You are the Coder.", messages=[{"role": "user", "content": "Fix add"}], model="m", max_tokens=10
    )
    request.worktree = str(tmp_path)
    result = provider.complete(request, on_chunk=chunks.append, should_cancel=cancel)
    return result, host, "".join(chunks)


def test_the_agents_requests_are_answered_by_the_host_and_it_is_told_of_refusals(settings, tmp_path) -> None:
    (tmp_path / "calc.py").write_text("a - b\n")
    script = [
        {"method": "fs/read_text_file", "params": {"path": f"{tmp_path}/calc.py"}},
        {"method": "fs/write_text_file", "params": {"path": f"{tmp_path}/calc.py", "content": "a + b\n"}},
        {"method": "fs/write_text_file", "params": {"path": "/etc/evil", "content": "x"}},
        {"method": "terminal/create", "params": {"command": "curl", "args": ["http://example.com"]}},
        {"method": "terminal/create", "params": {"command": "make test"}},
        {"method": "terminal/output", "params": {"terminalId": "term-1"}},
        {"method": "terminal/wait_for_exit", "params": {"terminalId": "term-1"}},
        {"method": "terminal/release", "params": {"terminalId": "term-1"}},
        {
            "method": "session/update",
            "params": {
                "sessionUpdate": "tool_call",
                "toolCallId": "t1",
                "title": "Edit calc.py",
                "kind": "edit",
                "rawInput": {"file_path": f"{tmp_path}/calc.py"},
            },
        },
        {
            "method": "session/request_permission",
            "params": {
                "toolCall": {"toolCallId": "t1"},
                "options": [
                    {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                ],
            },
        },
        {
            "method": "session/request_permission",
            "params": {
                "toolCall": {
                    "toolCallId": "t2",
                    "title": "rm -rf /",
                    "kind": "execute",
                    "rawInput": {"command": "rm -rf /"},
                },
                "options": [
                    {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                ],
            },
        },
    ]
    fake(settings, "script", script)

    result, host, log = call(tmp_path)

    assert (tmp_path / "calc.py").read_text() == "a + b\n"
    assert 'fs/read_text_file -> ok: {"content": "a - b\\n"' in log
    # Refused requests are the request's error: the agent reads why.
    assert "fs/write_text_file -> error: /etc/evil is outside the worktree" in log
    assert "terminal/create -> error: Only the test command may run" in log
    assert host.commands == [["curl", "http://example.com"][0], "make test"]
    assert '"output": "3 passed\\n"' in log and '"exitCode": 0' in log
    # Permissions: the host's policy chose the option, by its kind.
    assert [ask.kind for ask in host.asked] == ["edit", "execute"]
    assert host.asked[0].paths == (f"{tmp_path}/calc.py",) and host.asked[1].command == "rm -rf /"
    assert 'session/request_permission -> ok: {"outcome": {"optionId": "yes"' in log
    assert 'session/request_permission -> ok: {"outcome": {"optionId": "no"' in log
    assert "[Refused: Refused by policy]" in log
    # The live log shows its plan and messages; the result has its usage and cost.
    assert "[Plan]\n- [completed] Fix add" in log
    assert result.text.endswith("Fake agent done.") and result.stop_reason == "end_turn"
    assert (result.input_tokens, result.output_tokens, result.reported_cost_usd) == (1000, 500, 0.0123)
    assert [call.name for call in result.tool_calls] == ["Edit calc.py", "rm -rf /"]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("crash", "ended before it finished (exit status 3: fake agent: something broke inside)"),
        ("garbage", "broke the protocol: the agent wrote something that is not an ACP message: 'Hello! I am not"),
        ("auth", "is not logged in (Authentication required)"),
    ],
)
def test_a_broken_agent_ends_the_call_with_a_clear_message(settings, tmp_path, mode, expected) -> None:
    fake(settings, mode)
    started = time.monotonic()
    with pytest.raises(ProviderError) as raised:
        call(tmp_path)
    assert expected in raised.value.message and raised.value.message.startswith("Error: the coding agent fake")
    assert not raised.value.retryable
    assert time.monotonic() - started < 10


def test_no_key_is_not_logged_in_before_anything_starts(settings, tmp_path) -> None:
    fake(settings, "script")
    settings.ANTHROPIC_API_KEY = ""
    with pytest.raises(ProviderError, match="is not logged in \\(no API key is set\\)"):
        call(tmp_path)


def test_a_cancel_sends_session_cancel_and_the_agent_ends_its_turn(settings, tmp_path) -> None:
    fake(settings, "hang")
    started = time.monotonic()
    with pytest.raises(Cancelled):
        call(tmp_path, cancel=lambda: time.monotonic() - started > 1)
    assert time.monotonic() - started < acp_client.CANCEL_GRACE_SECONDS  # it ended its turn itself


def test_an_agent_that_ignores_the_cancel_is_stopped(settings, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(acp_client, "CANCEL_GRACE_SECONDS", 0.5)
    fake(settings, "deaf")
    started = time.monotonic()
    with pytest.raises(Cancelled):
        call(tmp_path, cancel=lambda: time.monotonic() - started > 0.5)
    assert time.monotonic() - started < 5


def test_the_deadline_stops_the_agent_and_the_call_may_be_retried(settings, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(acp_client, "CANCEL_GRACE_SECONDS", 0.5)
    fake(settings, "deaf")
    with pytest.raises(ProviderError, match="did not finish within 1 s") as raised:
        call(tmp_path, timeout=1)
    assert raised.value.retryable


def test_an_unknown_agent_is_refused(settings) -> None:
    fake(settings, "script")
    with pytest.raises(ProviderError, match="there is no coding agent 'nope' \\(ACP_AGENTS names fake\\)"):
        acp_agent("nope")


@needs_bwrap
def test_the_agent_runs_in_the_sandbox_with_only_its_environment(settings, tmp_path) -> None:
    """In its sandbox the agent sees the worktree at /workspace and none of the server's
    environment: its API key comes through the relay's login file."""
    script = [{"method": "fs/read_text_file", "params": {"path": "/workspace/calc.py"}}]
    fake(settings, "script", script, python="/usr/bin/python3")
    (tmp_path / "calc.py").write_text("x\n")
    tmp_path.chmod(0o777)

    class SandboxHost(Host):
        def read_text(self, path: str, line: int | None, limit: int | None) -> str:
            assert path == "/workspace/calc.py"
            return "seen from the sandbox\n"

    host = SandboxHost(tmp_path)
    provider = AcpProvider(agent=acp_agent("fake"), host=host, api_key="", timeout=30, sandboxed=True)
    request = LLMRequest(system="", messages=[{"role": "user", "content": "go"}], model="m", max_tokens=10)
    request.worktree = str(tmp_path)
    chunks: list[str] = []
    result = provider.complete(request, on_chunk=chunks.append, should_cancel=lambda: False)
    assert 'fs/read_text_file -> ok: {"content": "seen from the sandbox\\n"' in "".join(chunks)
    assert result.stop_reason == "end_turn"
