"""The scripted demo model (llm.demo): served as ``make demo`` serves it, and answering
the app's provider like a small, well-behaved model."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anthropic
import pytest

from llm.demo import DEMO_MODEL_LABEL, DemoModelServer, MessagesRequest, default_reply
from llm.demo.coder_reading import rename_asked
from llm.demo.request import lessons_taught
from llm.providers import provider_for
from llm.providers.base import LLMRequest, Tool
from pipelines.agents.recall import MEMORIES_HEADING, MEMORIES_INTRO

ROOT = Path(__file__).resolve().parents[2]

PLAN_TOOL = Tool(name="submit_plan", description="Submit the plan.", input_schema={"type": "object"})
REVIEW_TOOL = Tool(name="submit_review", description="Submit the review.", input_schema={"type": "object"})
LIST_FILES = Tool(name="list_files", description="List files.", input_schema={"type": "object"})
READ_FILE = Tool(name="read_file", description="Read a file.", input_schema={"type": "object"})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def demo_url() -> Iterator[str]:
    """``python -m llm.demo`` in its own process, as the Makefile's ``demo`` target runs it."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llm.demo", "--port", str(port), "--delay", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert DEMO_MODEL_LABEL in banner, banner
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def demo_server(settings) -> Iterator[DemoModelServer]:
    with DemoModelServer() as server:
        settings.ANTHROPIC_BASE_URL = server.url
        settings.ANTHROPIC_API_KEY = "demo-key-not-secret"
        settings.LLM_PROVIDER = "anthropic"
        settings.LLM_DEMO_MODE = True
        yield server


@pytest.mark.slow
def test_make_demo_serves_the_model_to_the_provider(demo_url: str, settings) -> None:
    settings.ANTHROPIC_BASE_URL = demo_url
    settings.ANTHROPIC_API_KEY = "demo-key-not-secret"
    settings.LLM_PROVIDER = "anthropic"
    settings.LLM_DEMO_MODE = True
    chunks: list[str] = []
    request = LLMRequest(
        system="You plan.", messages=[{"role": "user", "content": "Plan it"}], model="m", max_tokens=500, tool=PLAN_TOOL
    )
    result = provider_for().complete(request, on_chunk=chunks.append, should_cancel=lambda: False)
    assert result.tool_input is not None
    assert [subtask["id"] for subtask in result.tool_input["subtasks"]] == ["s1", "s2"]
    assert result.stop_reason == "tool_use"
    assert result.text.startswith("Reading the task")
    assert len(chunks) > 2
    assert result.input_tokens >= 1
    assert result.output_tokens > 1


@pytest.mark.slow
def test_the_server_needs_neither_django_nor_the_tests() -> None:
    code = (
        "import sys, llm.demo.__main__\n"
        "apps = {'django', 'tests', 'repos', 'memory', 'pipelines', 'chat', 'anthropic'}\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} & apps))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_reviewer_looks_around_then_answers(demo_server: DemoModelServer) -> None:
    messages: list[dict[str, object]] = [{"role": "user", "content": "Review it"}]
    request = LLMRequest(
        system="You review.",
        messages=messages,
        model="m",
        max_tokens=500,
        tool=REVIEW_TOOL,
        explore_tools=(LIST_FILES, READ_FILE),
    )
    calls = []
    tool_results = ["app.py (12 bytes)\nREADME.md (3 bytes)", "print('hi')"]
    for answer in [*tool_results, None]:
        result = provider_for().complete(request, on_chunk=lambda chunk: None, should_cancel=lambda: False)
        call = result.tool_calls[-1]
        calls.append((call.name, call.input))
        if answer is None:
            break
        messages.append({"role": "assistant", "content": result.content})
        result_block = {"type": "tool_result", "tool_use_id": call.id, "content": answer}
        messages.append({"role": "user", "content": [result_block]})
    assert calls[0] == ("list_files", {"path": "."})
    assert calls[1] == ("read_file", {"path": "app.py"})
    assert calls[2] == ("submit_review", {"pass": True, "findings": []})


def _coder_calls(
    demo_server: DemoModelServer,
    prompt: str,
    tools: tuple[Tool, ...],
    answer: Callable[[dict], str] = lambda tool_input: "ok",
    system: str = "You code.",
) -> list[tuple[str, dict]]:
    """The demo Coder's tool calls in an editing conversation, each answered by ``answer``."""
    editor = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
    messages: list[dict[str, object]] = [{"role": "user", "content": prompt}]
    request = LLMRequest(
        system=system, messages=messages, model="m", max_tokens=500, server_tools=(editor,), explore_tools=tools
    )
    calls: list[tuple[str, dict]] = []
    for _ in range(10):
        result = provider_for().complete(request, on_chunk=lambda chunk: None, should_cancel=lambda: False)
        if not result.tool_calls:
            calls.append(("(summary)", {"text": result.text}))
            return calls
        [call] = result.tool_calls
        calls.append((call.name, call.input or {}))
        messages.append({"role": "assistant", "content": result.content})
        block = {"type": "tool_result", "tool_use_id": call.id, "content": answer(call.input or {})}
        messages.append({"role": "user", "content": [block]})
    raise AssertionError(f"the demo Coder did not finish: {calls}")


def test_the_demo_coder_starts_each_subtask_of_the_plan_before_writing_its_file(demo_server: DemoModelServer) -> None:
    plan = [
        {"id": "s1", "title": "Write the change", "description": "", "order": 1},
        {"id": "s2", "title": "Cover it with a test", "description": "", "order": 2},
    ]
    start_subtask = Tool(name="start_subtask", description="Begin a subtask.", input_schema={"type": "object"})
    prompt = "# Task\nAdd a feature\n\n# Plan\n" + json.dumps(plan, indent=2) + "\n\nMake the changes."

    calls = _coder_calls(demo_server, prompt, (start_subtask,))

    steps = [(name, tool_input.get("order") or tool_input.get("path")) for name, tool_input in calls[:-1]]
    assert steps[2:] == [
        ("start_subtask", 1),
        ("str_replace_based_edit_tool", "src/feature.py"),
        ("start_subtask", 2),
        ("str_replace_based_edit_tool", "tests/test_feature.py"),
    ]
    # Without the tool (or a plan) it writes the same two files.
    without = _coder_calls(demo_server, prompt, ())
    assert [tool_input.get("path") for _, tool_input in without[:-1]] == [
        ".", "README.md", "src/feature.py", "tests/test_feature.py",
    ]  # fmt: skip


def test_the_demo_coder_never_creates_a_file_that_is_there(demo_server: DemoModelServer) -> None:
    listing = "Files and folders up to 2 levels deep in ., hidden items excluded:\nsrc/\nsrc/feature.py\ntests/"

    calls = _coder_calls(
        demo_server,
        "# Task\nTitle: Add a feature\n\n(no description)\n\n# Plan\n[]\n\nMake the changes.",
        (),
        answer=lambda tool_input: listing if tool_input.get("path") == "." else "ok",
    )

    created = [tool_input["path"] for _, tool_input in calls if tool_input.get("command") == "create"]
    assert created == ["src/feature_2.py", "tests/test_feature_2.py"]


def test_the_demo_coder_names_the_lessons_it_was_taught(demo_server: DemoModelServer) -> None:
    lessons = "- Keep fixes small.\n- Test first."
    system = f"You code.\n\n{MEMORIES_HEADING}\n{MEMORIES_INTRO}\n{lessons}\n\n# Your notes\n- x"
    prompt = "# Task\nTitle: Is it done?\n\n(no description)\n\n# Plan\n[]\n\nMake the changes."

    calls = _coder_calls(demo_server, prompt, (), system=system)

    [(_, summary)] = [call for call in calls if call[0] == "(summary)"]
    assert summary["text"].startswith("Nothing to change: the task asks a question.")
    assert not [call for call in calls if call[1].get("command") in ("create", "str_replace", "insert")]
    assert lessons_taught(system) == ["Keep fixes small.", "Test first."]
    editor = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
    body = {"system": system, "tools": [editor], "messages": [{"role": "user", "content": prompt}]}
    first = default_reply(MessagesRequest(path="/v1/messages", headers={}, body=body))
    assert first.text.startswith("Keeping in mind what the team taught me: “Keep fixes small.”; “Test first.”.\n")


@pytest.mark.parametrize(
    ("said", "quote", "rename"),
    [
        ("Rename `needs_reorder` to `is_due`", "", ("needs_reorder", "is_due")),
        ("please rename total into grand_total.", "", ("total", "grand_total")),
        ("`rate` → `tax_rate`", "", ("rate", "tax_rate")),
        ("Name this constant STOCK_0700", "    return 700", None),
        ("Name this constant STOCK_0700", "LIMIT = 700", ("LIMIT", "STOCK_0700")),
        ("Call it `is_low`", "    def needs_reorder(self) -> bool:", ("needs_reorder", "is_low")),
        ("Name this better", "    def needs_reorder(self) -> bool:", None),
        ("Say what this module is for", "x = 1", None),
    ],
)
def test_the_renames_a_review_can_ask_for(said: str, quote: str, rename: tuple[str, str] | None) -> None:
    assert rename_asked(said, quote) == rename


def test_chat_answers_without_streaming_too(demo_server: DemoModelServer) -> None:
    client = anthropic.Anthropic(api_key="demo-key-not-secret", base_url=demo_server.url, max_retries=0)
    message = client.messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "Remember that I like tea."}]
    )
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text"
    assert message.content[0].text == "I'll remember that. [REMEMBER: I like tea]"
    assert message.usage.output_tokens > 1

    with client.messages.stream(model="m", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]) as stream:
        text = "".join(stream.text_stream)
    assert text.startswith(f"Hello from the {DEMO_MODEL_LABEL}.")
