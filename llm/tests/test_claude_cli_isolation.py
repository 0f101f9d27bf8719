"""What the Claude CLI and what it runs can reach (llm/providers/claude_cli_sandbox.py):
the project's test command run through the CLI's Bash sees neither the operator's login
nor the server's loopback; the CLI itself reaches only its API; the Planner's and the
Reviewer's calls run sandboxed too; no call leaves its config folder or transcript.
The fake CLI (tests/bin/claude) stands in for a hostile one here — reaching for other
hosts, files and the server's loopback, reporting what it sees — which the real CLI
cannot be made to be; the real one's own behaviour is tested in
test_claude_cli_provider.py and test_claude_cli_editing.py. The fake API is
tests/fake_anthropic.py."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.exceptions import SandboxUnavailable
from core.sandbox_probe import sandbox_status
from core.tests.test_sandbox import needs_bwrap
from llm.providers import claude_cli, claude_cli_sandbox
from llm.providers.api_relay import ApiRelay
from llm.providers.base import LLMRequest, ProviderError
from llm.providers.claude_cli import ClaudeCliProvider
from llm.providers.claude_cli_login import LOGIN_EXPIRED, api_address
from pipelines.agents.prompts import PLAN_TOOL
from tests.fake_anthropic import FakeAnthropicServer
from tests.fake_claude import fake_claude

pytestmark = needs_bwrap

FAKE_CLAUDE = fake_claude()
ACCESS_TOKEN = "sk-ant-oat01-access-token-of-the-operator"
REFRESH_TOKEN = "sk-ant-ort01-refresh-token-of-the-operator"
API_KEY = "sk-ant-api03-key-of-the-operator"
SETTINGS_KEY = "sk-ant-api03-key-in-the-operators-settings"


@pytest.fixture(autouse=True)
def _fake_cli_sees_its_settings(monkeypatch) -> None:
    fake = {
        "FAKE_CLAUDE_MODE",
        "FAKE_CLAUDE_EDIT_MODE",
        "FAKE_CLAUDE_ADDRESSES",
        "FAKE_CLAUDE_SECRET_PATH",
        "FAKE_CLAUDE_ALSO_RUN",
    }
    monkeypatch.setattr(claude_cli, "CLI_ENVIRONMENT", claude_cli.CLI_ENVIRONMENT | fake)


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """The server's account, logged in to the CLI: an OAuth login and an API key."""
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    login = {"claudeAiOauth": {"accessToken": ACCESS_TOKEN, "refreshToken": REFRESH_TOKEN}}
    (home / ".claude" / ".credentials.json").write_text(json.dumps(login))
    (home / ".claude" / "settings.json").write_text(json.dumps({"env": {"SOME_SETTING": SETTINGS_KEY}}))
    (home / ".claude.json").write_text(json.dumps({"primaryApiKey": API_KEY, "oauthAccount": {"emailAddress": "o"}}))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    return home


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch) -> Path:
    """The server's temporary folder: whatever a call makes there must be gone after it."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def worktree(tmp_path: Path, settings) -> Path:
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    folder = tmp_path / "worktrees" / "task-1-run-1"
    folder.mkdir(parents=True)
    sandbox_status(refresh=True)
    return folder


class Listener:
    """A service on the server's loopback (think Redis): records every connection."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            client.sendall(b"+PONG\r\n")
            client.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    service = Listener()
    yield service
    service.socket.close()


def _edit_request(worktree: Path, test_command: str = "") -> LLMRequest:
    return LLMRequest(
        system="You code.",
        messages=[{"role": "user", "content": "Add hello.py"}],
        model="claude-sonnet-4-5",
        max_tokens=100,
        worktree=str(worktree),
        allowed_commands=(test_command,) if test_command else (),
        max_turns=5,
    )


def _plan_request() -> LLMRequest:
    return LLMRequest(
        system="You plan.", messages=[{"role": "user", "content": "Plan it"}], model="m", max_tokens=100, tool=PLAN_TOOL
    )


def _complete(request: LLMRequest):
    provider = ClaudeCliProvider(executable=FAKE_CLAUDE)
    return provider.complete(request, on_chunk=lambda c: None, should_cancel=lambda: False)


def _hostile(port: int) -> str:
    """A command that prints every secret it can find and reaches for a service of the server's."""
    return (
        "echo STARTED; "
        "cat /home/sandbox/.claude/.credentials.json /home/sandbox/.claude/.claude.json "
        '/home/sandbox/.claude/settings.json "$CLAUDE_CONFIG_DIR/.credentials.json"; '
        "env; cat /proc/*/environ | tr '\\0' '\\n'; "
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('CONNECTED')\""
        " || echo NOT-CONNECTED"
    )


@pytest.mark.parametrize("how", ["test command", "other shell command"])
def test_a_hostile_command_sees_no_login_and_no_loopback_of_the_server(
    how: str, worktree: Path, home: Path, scratch: Path, listener: Listener, monkeypatch
) -> None:
    """The project's test command (agent-written code runs in it), and any other command
    the CLI's Bash tool may run (those it deems read-only, ``git status``: a worktree's git
    config can make them run anything)."""
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")
    if how == "other shell command":
        monkeypatch.setenv("FAKE_CLAUDE_ALSO_RUN", _hostile(listener.port))

    output = _complete(
        _edit_request(worktree, "echo the tests" if how == "other shell command" else _hostile(listener.port))
    ).text

    assert "STARTED" in output and "NOT-CONNECTED" in output  # it ran, to its end
    for secret in (ACCESS_TOKEN, REFRESH_TOKEN, API_KEY, SETTINGS_KEY):
        assert secret not in output
    assert "CONNECTED\n" not in output.replace("NOT-CONNECTED", "")
    assert listener.connections == 0


def test_the_cli_reaches_its_api_and_nothing_else(
    worktree: Path, home: Path, scratch: Path, listener: Listener, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "network")
    other = f"127.0.0.1:{listener.port}"
    with FakeAnthropicServer() as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("FAKE_CLAUDE_ADDRESSES", f"{other},{api.url.split('//')[1]}")
        report = json.loads(_complete(_edit_request(worktree)).text)
        answered = len(api.requests)

    assert report["proxied"][api.url] == 200 and answered >= 1  # its API, through the relay
    assert report["proxied"][f"http://{other}"] == 403  # any other address: refused by the relay
    assert set(report["direct"].values()) == {"ConnectionRefusedError"}  # no network of the server's
    assert listener.connections == 0


def test_planner_and_reviewer_calls_run_in_the_sandbox(
    home: Path, scratch: Path, tmp_path: Path, settings, listener: Listener, monkeypatch
) -> None:
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    sandbox_status(refresh=True)
    secret = tmp_path / "db.sqlite3"
    secret.write_text("server data")
    secret.chmod(0o644)
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "record")
    monkeypatch.setenv("FAKE_CLAUDE_SECRET_PATH", str(secret))
    started: list[str] = []
    popen_init = subprocess.Popen.__init__

    def recorded_init(self, args, *positional, **keywords):
        # Every start, the sandbox's own Popen subclass (core/sandbox_limits.py) included.
        started.extend(str(arg) for arg in args)
        popen_init(self, args, *positional, **keywords)

    monkeypatch.setattr(subprocess.Popen, "__init__", recorded_init)

    recorded = json.loads(_complete(_plan_request()).text)

    assert recorded["cwd"] == "/workspace" and recorded["home"] == "/home/sandbox"
    assert recorded["config"] == "/home/sandbox/.claude"
    assert recorded["secret_readable"] is False
    assert recorded["env"].count("CLAUDE_CODE_OAUTH_TOKEN") == 1 and "HTTPS_PROXY" in recorded["env"]
    # Its token reached it, but not through bwrap's command line (the server's process list).
    assert any(arg.endswith("bwrap") for arg in started)
    assert ACCESS_TOKEN not in " ".join(started) and API_KEY not in " ".join(started)


@pytest.mark.parametrize("kind", ["plan", "edit"])
def test_no_transcript_or_config_folder_survives_a_call(
    kind: str, worktree: Path, home: Path, scratch: Path, monkeypatch
) -> None:
    _complete(_plan_request() if kind == "plan" else _edit_request(worktree))

    assert [path.name for path in (home / ".claude" / "projects").iterdir()] == []
    config = sorted(path.name for path in (home / ".claude").iterdir())
    assert config == [".credentials.json", "projects", "settings.json"]
    assert list(scratch.iterdir()) == []


def test_the_relay_tunnels_only_to_its_api(tmp_path: Path, listener: Listener) -> None:
    """HTTPS: ``CONNECT host:port`` to the API's address only (the TLS inside is the CLI's)."""
    folder = Path(tempfile.mkdtemp(prefix="relay-", dir="/tmp"))
    relay = ApiRelay(folder, scheme="https", host="127.0.0.1", port=listener.port)
    try:

        def connect(target: str) -> bytes:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(5)
                client.connect(str(relay.path))
                client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
                received = b""
                while chunk := client.recv(4096):
                    received += chunk
                return received

        assert connect(f"127.0.0.1:{listener.port}") == b"HTTP/1.1 200 Connection established\r\n\r\n+PONG\r\n"
        assert connect(f"127.0.0.1:{listener.port + 1}").startswith(b"HTTP/1.1 403")
        assert connect(f"localhost:{listener.port}").startswith(b"HTTP/1.1 403")  # the name the API was given
        assert listener.connections == 1
        assert relay.refused == [f"127.0.0.1:{listener.port + 1}", f"localhost:{listener.port}"]
    finally:
        relay.close()
        shutil.rmtree(folder)


def test_a_login_whose_access_token_ran_out_is_a_clear_error(home: Path, scratch: Path, settings, tmp_path) -> None:
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    sandbox_status(refresh=True)
    expired = {"claudeAiOauth": {"accessToken": ACCESS_TOKEN, "refreshToken": REFRESH_TOKEN, "expiresAt": 1_000_000}}
    (home / ".claude" / ".credentials.json").write_text(json.dumps(expired))
    (home / ".claude.json").write_text("{}")

    with pytest.raises(ProviderError) as excinfo:
        _complete(_plan_request())

    assert excinfo.value.message == LOGIN_EXPIRED.format(when="1970-01-01 00:16 UTC")
    assert list(scratch.iterdir()) == []
    # With a key of its own the CLI does not need the token.
    (home / ".claude.json").write_text(json.dumps({"primaryApiKey": API_KEY}))
    assert _complete(_plan_request()).tool_input is not None


def test_the_test_command_run_through_the_cli_keeps_the_verify_limits(
    worktree: Path, home: Path, scratch: Path, settings, monkeypatch
) -> None:
    settings.VERIFY_MEMORY_MB = 512
    settings.VERIFY_CPU_SECONDS = 77
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")

    output = _complete(_edit_request(worktree, "echo memory $(ulimit -v) cpu $(ulimit -t)")).text

    assert "memory 524288 cpu 77" in output


def test_unsandboxed_the_test_command_still_runs_and_the_config_folder_goes(
    worktree: Path, home: Path, scratch: Path, settings, monkeypatch
) -> None:
    """The operator's UNSAFE_RUN_TESTS_WITHOUT_SANDBOX: no isolation, but the same tools."""
    settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = True
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")

    output = _complete(_edit_request(worktree, "echo tests ran in $(pwd)")).text

    assert f"tests ran in {worktree}" in output
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "record")
    assert "Plan it" in json.loads(_complete(_plan_request()).text)["prompt"]
    assert list(scratch.iterdir()) == [] and list((home / ".claude" / "projects").iterdir()) == []


def test_without_a_python_for_the_relay_the_cli_does_not_start(home: Path, scratch: Path, monkeypatch) -> None:
    monkeypatch.setattr(claude_cli_sandbox, "SANDBOX_PYTHON", ("/nonexistent/python3",))
    with pytest.raises(SandboxUnavailable) as excinfo:
        _complete(_plan_request())
    assert excinfo.value.message == claude_cli_sandbox.NO_SANDBOX_PYTHON
    assert list(scratch.iterdir()) == []


def test_the_api_is_the_one_the_cli_will_use(tmp_path: Path) -> None:
    assert api_address({}, tmp_path) == ("https", "api.anthropic.com", 443)
    assert api_address({"ANTHROPIC_BASE_URL": "http://127.0.0.1:8123"}, tmp_path) == ("http", "127.0.0.1", 8123)
    # The operator's settings.json env wins, as it does in the CLI.
    (tmp_path / "settings.json").write_text(json.dumps({"env": {"ANTHROPIC_BASE_URL": "https://GW.example:8443/x"}}))
    assert api_address({"ANTHROPIC_BASE_URL": "http://127.0.0.1:8123"}, tmp_path) == ("https", "gw.example", 8443)


PROJECT_SECRET = "tok-cli-7e3a9d41c0"


@pytest.mark.parametrize("sandboxed", [True, False])
def test_the_projects_variables_reach_the_test_command_only_masked_in_what_comes_back(
    sandboxed: bool, worktree: Path, home: Path, scratch: Path, settings, monkeypatch
) -> None:
    """The test command gets the variables (it checks the value itself); another Bash
    command and the CLI's own environment do not; the secret never comes back out,
    neither in what the CLI read nor in what it streamed."""
    settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = not sandboxed
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")
    monkeypatch.setenv("FAKE_CLAUDE_ALSO_RUN", 'echo "other command sees [$API_TOKEN]"; env | grep -c API_TOKEN')
    test_command = (
        'test "$API_TOKEN" = "' + PROJECT_SECRET + '" && echo token-received; echo "region=$REGION printed $API_TOKEN"'
    )
    request = dataclasses.replace(
        _edit_request(worktree, test_command),
        command_variables=(("API_TOKEN", PROJECT_SECRET), ("REGION", "eu-west-1")),
        command_secrets=(PROJECT_SECRET,),
    )
    chunks: list[str] = []

    result = ClaudeCliProvider(executable=FAKE_CLAUDE).complete(
        request, on_chunk=chunks.append, should_cancel=lambda: False
    )

    assert "token-received" in result.text and "region=eu-west-1 printed ••••••" in result.text
    assert "other command sees []" in result.text
    assert PROJECT_SECRET not in result.text and PROJECT_SECRET not in "".join(chunks)
    assert PROJECT_SECRET not in json.dumps(result.content)


def test_the_cli_itself_is_not_given_the_projects_variables(
    worktree: Path, home: Path, scratch: Path, monkeypatch
) -> None:
    """The CLI's own environment (its model could read it) and its argv hold none of
    them, nor does any file it is given (its tools folder, its config folder)."""
    monkeypatch.setenv("FAKE_CLAUDE_ARGV_FILE", "/workspace/argv.json")  # the worktree, inside
    monkeypatch.setattr(claude_cli, "CLI_ENVIRONMENT", claude_cli.CLI_ENVIRONMENT | {"FAKE_CLAUDE_ARGV_FILE"})
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")
    tools = "$(dirname $(command -v autocoder-run-tests))"
    monkeypatch.setenv("FAKE_CLAUDE_ALSO_RUN", f"grep -rl {PROJECT_SECRET} {tools} || echo none")
    request = dataclasses.replace(
        _edit_request(worktree, 'test -n "$API_TOKEN" && echo has-token'),
        command_variables=(("API_TOKEN", PROJECT_SECRET),),
        command_secrets=(PROJECT_SECRET,),
    )

    result = _complete(request)

    assert "has-token" in result.text  # the test command had it
    assert "none" in result.text  # no file of the tools holds the value
    recorded = (worktree / "argv.json").read_text()
    assert "API_TOKEN" not in json.loads(recorded)["env"]
    assert PROJECT_SECRET not in recorded
