"""The scripted demo model: what it is asked, what it can say, and what it says.

It answers like a small, well-behaved model, so that ``make demo`` runs whole pipelines
and chats without an API key: each agent gets the tool call its forced tool (or its
``submit_…`` tool) asks for, after a look at the repository when it has the repository
tools; the chat gets plain text that shows the memory markers at work.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

DEMO_MODEL_LABEL = "scripted demo model"


@dataclass
class MessagesRequest:
    """A ``POST /v1/messages`` as received: the body is the SDK's JSON, unchanged."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def forced_tool(self) -> str | None:
        choice = self.body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "tool" and choice.get("name"):
            return str(choice["name"])
        return None

    @property
    def answer_tool(self) -> str | None:
        """The tool that ends the agent's turn: the forced one, or the ``submit_…`` tool
        when the model may choose among tools (a tool-use loop)."""
        if self.forced_tool:
            return self.forced_tool
        for name in self.tool_names:
            if name.startswith("submit_"):
                return name
        return None

    @property
    def tool_names(self) -> list[str]:
        return [str(tool.get("name")) for tool in self._list("tools") if isinstance(tool, dict)]

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks sent back so far in this conversation."""
        return [
            block
            for message in self.messages
            if isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]

    @property
    def prompt_text(self) -> str:
        parts: list[str] = []
        system = self.body.get("system")
        if isinstance(system, str):
            parts.append(system)
        elif isinstance(system, list):
            parts.extend(str(block.get("text", "")) for block in system if isinstance(block, dict))
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(json.dumps(block) for block in content)
        return "\n".join(parts)

    def _list(self, key: str) -> list[Any]:
        value = self.body.get(key)
        return value if isinstance(value, list) else []

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [message for message in self._list("messages") if isinstance(message, dict)]


@dataclass
class ToolReply:
    """The model calls ``name`` (default: the tool the request forces) with ``input``."""

    input: dict[str, Any]
    name: str | None = None
    text: str = ""
    chunk_size: int = 24
    chunk_delay: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass
class TextReply:
    text: str
    chunk_size: int = 16
    chunk_delay: float = 0.0


DemoReply = ToolReply | TextReply


def default_reply(request: MessagesRequest, delay: float = 0.01) -> DemoReply:
    """What the demo model answers; ``delay`` is the pause between streamed chunks."""
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
        return ToolReply(
            text=(
                "Reading the task and splitting it into steps. The change needs a small, typed "
                "function and a test that pins its behaviour down.\n"
            ),
            input={
                "subtasks": [
                    {"id": "s1", "title": "Write the change", "description": "Implement the task.", "order": 1},
                    {"id": "s2", "title": "Cover it with a test", "description": "Add a test.", "order": 2},
                ]
            },
            chunk_delay=delay,
        )
    if tool == "submit_changes":
        return ToolReply(
            text="Writing the files for the plan: the function first, then its test.\n",
            input={
                "changes": [
                    {
                        "file_path": "src/feature.py",
                        "content": 'def feature() -> str:\n    return "done"\n',
                        "action": "create",
                    },
                    {
                        "file_path": "tests/test_feature.py",
                        "content": (
                            "from src.feature import feature\n\n\n"
                            "def test_feature() -> None:\n"
                            '    assert feature() == "done"\n'
                        ),
                        "action": "create",
                    },
                ]
            },
            chunk_delay=delay,
        )
    if tool == "submit_review":
        return ToolReply(
            text="Checking the changes against the plan: the function is typed and the test covers it.\n",
            input={"pass": True, "findings": []},
            chunk_delay=delay,
        )
    return TextReply(text=_chat_answer(request), chunk_delay=delay)


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
