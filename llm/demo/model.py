"""The scripted demo model: what it says to each of the app's agents and to the chat.

It answers like a small, well-behaved model, so that ``make demo`` runs whole pipelines
and chats without an API key: each agent gets the tool call its forced tool (or its
``submit_…`` tool) asks for, after a look at the repository when it has the repository
tools; the Coder works through its tools (llm/demo/coder.py), or through the Claude CLI's
(coder_cli.py) or opencode's (coder_opencode.py) when it is theirs; the chat gets plain text
that shows the memory markers at work. Every answer follows from the request alone.
"""

from __future__ import annotations

import re
from typing import Any

from llm.demo.coder import coder_reply
from llm.demo.coder_cli import cli_coder_reply, drives_the_cli
from llm.demo.coder_opencode import drives_opencode, opencode_coder_reply
from llm.demo.coder_reading import EDITOR_TOOL_NAME
from llm.demo.demo_app import BIG_FILE
from llm.demo.request import DemoReply, MessagesRequest, TextReply, ToolReply, lessons_taught, plan_orders

__all__ = [
    "DEMO_MODEL_LABEL",
    "EDITOR_TOOL_NAME",
    "DemoReply",
    "MessagesRequest",
    "TextReply",
    "ToolReply",
    "default_reply",
    "plan_orders",
]

DEMO_MODEL_LABEL = "scripted demo model"


def default_reply(request: MessagesRequest, delay: float = 0.01) -> DemoReply:
    """What the demo model answers; ``delay`` is the pause between streamed chunks."""
    for drives, coder in ((drives_the_cli, cli_coder_reply), (drives_opencode, opencode_coder_reply)):
        if drives(request):
            step = coder(request, delay)
            return TextReply(text=step, chunk_delay=delay) if isinstance(step, str) else step
    if EDITOR_TOOL_NAME in request.tool_names and not request.forced_tool:
        step = coder_reply(request, delay)
        return TextReply(text=step, chunk_delay=delay) if isinstance(step, str) else step
    if request.structured_output_schema and request.tool_results:
        # The Claude CLI acknowledged the structured answer: the turn is over.
        return TextReply(text="Answered.", chunk_delay=delay)
    reply = _agent_reply(request, delay)
    if isinstance(reply, ToolReply) and not request.tool_results and request.answer_tool != "record_lessons":
        taught = lessons_taught(request.system_text)
        if taught:
            said = "; ".join(f"“{lesson}”" for lesson in taught)
            reply.text = f"Keeping in mind what the team taught me: {said}.\n{reply.text}"
    return reply


def _agent_reply(request: MessagesRequest, delay: float) -> DemoReply:
    tool = request.answer_tool
    if "list_files" in request.tool_names and not request.forced_tool and not request.tool_results:
        # Given the repository tools, look around once before answering.
        return ToolReply(
            name="list_files",
            text="Looking at the repository before changing it.\n",
            input={"path": "."},
            chunk_delay=delay,
        )
    first_file = _first_file_listed(request)
    if first_file and not request.forced_tool and len(request.tool_results) == 1:
        # Then read one of the files it saw, as a model would before writing.
        return ToolReply(
            name="read_file",
            text=f"Reading {first_file} to see how the code is laid out.\n",
            input={"path": first_file},
            chunk_delay=delay,
        )
    if tool == "submit_plan":
        subtasks = _plan(request)
        steps = " Then ".join(f"{subtask['title']}." for subtask in subtasks)
        return ToolReply(
            text=f"Reading the task and splitting it into steps: {steps}\n",
            input={"subtasks": subtasks},
            chunk_delay=delay,
        )
    if tool == "submit_review":
        unchanged = "# Changes (unified diff)\n(no changes)" in request.prompt_text
        return ToolReply(
            text=(
                "Nothing was changed, and the task needed no change: nothing to hold back.\n"
                if unchanged
                else "Checking the changes against the plan: the change is small and the tests cover it.\n"
            ),
            input={"pass": True, "findings": []},
            chunk_delay=delay,
        )
    if tool == "record_lessons":
        return ToolReply(
            text="Keeping what holds beyond this change.\n",
            input=_lessons_said(request),
            chunk_delay=delay,
        )
    return TextReply(text=_chat_answer(request), chunk_delay=delay)


def _plan(request: MessagesRequest) -> list[dict[str, str | int]]:
    """Two subtasks: the demo repository's a one-line fix pinned down by a test; elsewhere a
    function and its test. A question (a title ending in "?") is one subtask: answer it."""
    title = re.search(r"^Title: (.*)$", request.prompt_text, re.MULTILINE)
    if title and title.group(1).rstrip().endswith("?"):
        return [{"id": "s1", "title": "Read the code and answer", "description": "No change needed.", "order": 1}]
    if f"\n{BIG_FILE}" in request.prompt_text:
        steps = [
            ("Find the line to change and pin it down with a test", "A test that fails until the change is made."),
            ("Change that one line", "One str_replace; then the tests pass."),
        ]
    else:
        steps = [("Write the change", "Implement the task."), ("Cover it with a test", "Add a test.")]
    return [
        {"id": f"s{order}", "title": title, "description": description, "order": order}
        for order, (title, description) in enumerate(steps, start=1)
    ]


_ABOUT_FILES = re.compile(r"\s*\[about ([^\]]+)\]$")


def _lessons_said(request: MessagesRequest) -> dict[str, list[Any]]:
    """The demo's distillation: what was said (the prompt's bullet lines), at most three,
    as sentences, each about the files it was said about."""
    lessons: list[dict[str, Any]] = []
    for line in request.message_texts[-1].splitlines():
        text = line[2:].strip() if line.startswith("- ") else ""
        about = _ABOUT_FILES.search(text)
        text = text[: about.start()] if about else text
        if text and len(lessons) < 3:
            files = [path.strip() for path in about.group(1).split(",")] if about else []
            lesson = (text if text.endswith(".") else f"{text}.")[:400]
            where = f"changing {', '.join(files)}" if files else "changing this project's code"
            lessons.append({"lesson": lesson, "applies_when": where[:200], "files": files})
    return {"lessons": lessons}


def _first_file_listed(request: MessagesRequest) -> str | None:
    """The first file in a ``list_files`` answer (lines like ``name (12 bytes)``)."""
    results = request.tool_results
    if not results or "read_file" not in request.tool_names:
        return None
    content = results[0].get("content")
    if isinstance(content, list):
        content = "\n".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    match = re.search(r"^(\S[^\n]*?) \(\d+ bytes\)$", str(content or ""), re.MULTILINE)
    return match.group(1) if match else None


def _chat_answer(request: MessagesRequest) -> str:
    """A chat reply that shows the memory markers at work: "remember that X" is
    remembered, "my goal is X" becomes a goal, "I finished X" completes one."""
    messages = request.messages or [{}]
    last = messages[-1].get("content", "")
    if isinstance(last, list):
        last = " ".join(str(block.get("text", "")) for block in last if isinstance(block, dict))
    said = str(last).strip()
    lowered = said.lower()
    for cue, marker, reply in (
        ("remember that ", "REMEMBER", "I'll remember that."),
        ("my goal is ", "GOAL", "Good goal; I'll keep it in mind."),
        ("i finished ", "DONE", "Well done!"),
    ):
        if cue in lowered:
            value = said[lowered.index(cue) + len(cue) :].rstrip(".!")
            return f"{reply} [{marker}: {value}]"
    return (
        f'Hello from the {DEMO_MODEL_LABEL}. Try "remember that …", "my goal is …" '
        'or "I finished …" to see the memory at work.'
    )
