"""The Coder's tools behind one dispatcher: a scripted editing conversation through the
Anthropic provider on a real git repository, run_tests in the sandbox, the limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.exceptions import SandboxUnavailable
from core.tests.test_sandbox import needs_bwrap
from llm.providers.anthropic import AnthropicProvider
from llm.providers.base import LLMRequest
from repos import coder_tools as coder_tools_module
from repos.coder_tools import RUN_TESTS, CoderSession, coder_tool_names, coder_tool_run, coder_tools
from repos.editor import DELETE_FILE, EDITOR_TOOL
from repos.tests.test_services import git, make_repo
from repos.tools import SEARCH_CODE
from tests.fake_anthropic import FakeAnthropicServer, TextReply, ToolReply

EPHEMERAL = {"type": "ephemeral"}
CHECK = "import sys\nok = open('flag.txt').read().strip() == 'ok'\nprint('checked', ok)\nsys.exit(0 if ok else 1)\n"


@pytest.fixture
def fake_llm():
    with FakeAnthropicServer() as server:
        yield server


@pytest.fixture
def worktree(tmp_path: Path, settings) -> Path:
    """A git repository the sandbox user can reach (WORKTREES_ROOT, as a run's worktree)."""
    settings.WORKTREES_ROOT = str(tmp_path)
    return make_repo(tmp_path / "task-1-run-1", {"app.py": "def answer():\n    return 41\n", "check.py": CHECK})


def test_the_coder_is_offered_the_editor_search_delete_and_run_tests() -> None:
    server, client = coder_tools()
    assert server == (EDITOR_TOOL,)
    assert client == (SEARCH_CODE, DELETE_FILE, RUN_TESTS)
    assert coder_tool_names() == ("str_replace_based_edit_tool", "search_code", "delete_file", "run_tests")


def test_an_editing_conversation_in_two_turns(fake_llm, worktree: Path) -> None:
    edit = {"command": "str_replace", "path": "app.py", "old_str": "return 41", "new_str": "return 42"}
    fake_llm.script(
        ToolReply(name="str_replace_based_edit_tool", text="Fixing it. ", input=edit),
        TextReply(text="The answer is 42 now."),
    )
    provider = AnthropicProvider(api_key="sk-test", base_url=fake_llm.url, timeout=5)
    server_tools, client_tools = coder_tools()
    request = LLMRequest(
        system="You are the Coder.",
        messages=[{"role": "user", "content": "Make answer() return 42."}],
        model="claude-x",
        max_tokens=1000,
        server_tools=server_tools,
        explore_tools=client_tools,
    )
    session = CoderSession()

    first = provider.complete(request, on_chunk=lambda c: None, should_cancel=lambda: False)
    body = fake_llm.requests[0].body
    assert body["tools"][0] == EDITOR_TOOL
    assert [tool["name"] for tool in body["tools"]] == list(coder_tool_names())
    assert [tool.get("cache_control") for tool in body["tools"]] == [None, None, None, EPHEMERAL]
    assert body["tool_choice"] == {"type": "auto"}
    assert first.stop_reason == "tool_use"
    [call] = first.tool_calls
    assert (call.name, call.input) == ("str_replace_based_edit_tool", edit)

    outcome = coder_tool_run(worktree, call.name, call.input, test_command="", session=session)
    assert not outcome.is_error and outcome.changed_path == "app.py"
    assert "return 42" in outcome.content
    assert (worktree / "app.py").read_text() == "def answer():\n    return 42\n"
    assert git(worktree, "status", "--porcelain") == "M app.py"

    result_block = {"type": "tool_result", "tool_use_id": call.id, "content": outcome.content, "is_error": False}
    request.messages = [
        *request.messages,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [result_block]},
    ]
    second = provider.complete(request, on_chunk=lambda c: None, should_cancel=lambda: False)
    sent = fake_llm.requests[1].body["messages"]
    assert sent[1] == {"role": "assistant", "content": first.content}
    assert sent[1]["content"][-1]["type"] == "tool_use" and sent[1]["content"][-1]["id"] == call.id
    assert sent[2]["content"] == [{**result_block, "cache_control": EPHEMERAL}]
    assert second.text == "The answer is 42 now."
    assert second.stop_reason == "end_turn" and second.tool_calls == []


def test_an_unknown_tool_and_broken_input_are_errors(worktree: Path) -> None:
    session = CoderSession()
    unknown = coder_tool_run(worktree, "run_shell", {"command": "rm -rf /"}, test_command="true", session=session)
    assert unknown.is_error and "no tool 'run_shell'" in unknown.content and "run_tests" in unknown.content
    broken = coder_tool_run(worktree, "str_replace_based_edit_tool", None, test_command="true", session=session)
    assert broken.is_error and "not valid JSON" in broken.content
    view = coder_tool_run(
        worktree, "str_replace_based_edit_tool", {"command": "view", "path": "app.py"}, test_command="", session=session
    )
    assert not view.is_error and "return 41" in view.content
    found = coder_tool_run(worktree, "search_code", {"pattern": "return 41"}, test_command="", session=session)
    assert not found.is_error and "app.py:2" in found.content
    deleted = coder_tool_run(worktree, "delete_file", {"path": "check.py"}, test_command="", session=session)
    assert deleted.changed_path == "check.py" and not (worktree / "check.py").exists()
    assert session.test_runs == 0


def test_without_a_test_command_or_a_sandbox_nothing_runs_and_no_run_is_spent(worktree: Path, monkeypatch) -> None:
    session = CoderSession()
    none = coder_tool_run(worktree, "run_tests", {}, test_command="  ", session=session)
    assert none.is_error and "no test command" in none.content

    def unavailable(**kwargs):
        raise SandboxUnavailable("bubblewrap is not installed")

    monkeypatch.setattr(coder_tools_module, "run_project_tests", unavailable)
    outcome = coder_tool_run(worktree, "run_tests", {}, test_command="python3 check.py", session=session)
    assert outcome.is_error and "cannot run here: bubblewrap is not installed" in outcome.content
    assert session.test_runs == 0


@needs_bwrap
def test_run_tests_fails_then_passes_after_an_edit(worktree: Path) -> None:
    (worktree / "flag.txt").write_text("not yet\n")
    session = CoderSession(max_test_runs=3)
    failed = coder_tool_run(worktree, "run_tests", {"note": "before"}, test_command="python3 check.py", session=session)
    assert failed.is_error
    assert failed.content.startswith("The tests failed (exit status 1). 2 test runs left.")
    assert "checked False" in failed.content
    edit = {"command": "str_replace", "path": "flag.txt", "old_str": "not yet", "new_str": "ok"}
    assert not coder_tool_run(worktree, "str_replace_based_edit_tool", edit, test_command="", session=session).is_error
    passed = coder_tool_run(worktree, "run_tests", {}, test_command="python3 check.py", session=session)
    assert not passed.is_error
    assert passed.content.startswith("The tests passed (exit status 0). 1 test run left.")
    assert "checked True" in passed.content
    assert session.test_runs == 2


@needs_bwrap
def test_runs_are_capped_per_conversation(worktree: Path, settings) -> None:
    settings.CODER_MAX_TEST_RUNS = 1
    session = CoderSession()
    first = coder_tool_run(worktree, "run_tests", {}, test_command="echo ran >> runs.txt", session=session)
    assert not first.is_error and "0 test runs left" in first.content
    refused = coder_tool_run(worktree, "run_tests", {}, test_command="echo ran >> runs.txt", session=session)
    assert refused.is_error and "No test runs are left: the limit is 1" in refused.content
    assert (worktree / "runs.txt").read_text() == "ran\n"  # the second never ran
    assert session.test_runs == 1


@needs_bwrap
def test_only_the_tail_of_long_output_is_answered(worktree: Path, settings) -> None:
    settings.CODER_TEST_OUTPUT_MAX_CHARS = 1000
    streamed: list[str] = []
    session = CoderSession(on_output=streamed.append)
    outcome = coder_tool_run(
        worktree, "run_tests", {}, test_command="python3 -c \"print('x' * 20000 + 'END')\"; exit 2", session=session
    )
    assert outcome.is_error and "exit status 2" in outcome.content
    assert "[… 19004 earlier characters cut]\n" in outcome.content
    assert outcome.content.endswith("xEND")
    assert len(outcome.content) < 1200
    assert "".join(streamed).count("x") == 20000  # the log gets all of it: under VERIFY_STREAM_MAX_CHARS


@needs_bwrap
def test_the_log_gets_at_most_the_stream_cap_of_a_runs_output(worktree: Path, settings) -> None:
    settings.VERIFY_STREAM_MAX_CHARS = 5000
    streamed: list[str] = []
    session = CoderSession(on_output=streamed.append)
    outcome = coder_tool_run(
        worktree, "run_tests", {}, test_command="python3 -c \"print('x' * 2_000_000 + 'END')\"", session=session
    )
    log = "".join(streamed)
    assert log.count("x") == 5000 and log.count("the rest is not streamed") == 1 and len(log) < 5200
    assert not outcome.is_error and outcome.content.endswith("xEND")
