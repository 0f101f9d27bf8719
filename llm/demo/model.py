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
        """The system prompt and the messages as text (a text block as its text, other
        blocks as JSON; prompt-caching marks left out)."""
        return "\n".join(text for _, text, _ in self.prompt_parts())

    @property
    def system_text(self) -> str:
        """The system prompt, sent as a string or as text blocks."""
        system = self.body.get("system")
        if isinstance(system, list):
            return "\n".join(str(block.get("text", "")) for block in system if isinstance(block, dict))
        return str(system or "")

    @property
    def message_texts(self) -> list[str]:
        """Each message's text: a string content as it is, text blocks joined."""
        texts = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(
                    str(block.get("text", "")) for block in content if isinstance(block, dict) and "text" in block
                )
            texts.append(str(content or ""))
        return texts

    def prompt_parts(self) -> list[tuple[str, str, bool]]:
        """The prompt in the order the API caches it (tools, system, messages): each
        part's ``(key, text, breakpoint)``: the key identifies it in a cached prefix,
        the text is what it says (tool definitions say nothing: they are not counted
        as prompt text), and ``breakpoint`` is whether it carries ``cache_control``."""
        parts: list[tuple[str, str, bool]] = []
        for tool in self._list("tools"):
            if isinstance(tool, dict):
                parts.append((_key(tool), "", "cache_control" in tool))
        system = self.body.get("system")
        if isinstance(system, str):
            parts.append(_block_part({"type": "text", "text": system}))
        elif isinstance(system, list):
            parts.extend(_block_part(block) for block in system if isinstance(block, dict))
        for message in self.messages:
            content = message.get("content")
            role = str(message.get("role"))
            if isinstance(content, str):
                # The same as one text block (the API caches them alike).
                parts.append(_block_part({"type": "text", "text": content}, role))
            elif isinstance(content, list):
                parts.extend(_block_part(block, role) for block in content if isinstance(block, dict))
        return parts

    def _list(self, key: str) -> list[Any]:
        value = self.body.get(key)
        return value if isinstance(value, list) else []

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [message for message in self._list("messages") if isinstance(message, dict)]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _block_part(block: dict[str, Any], role: str = "system") -> tuple[str, str, bool]:
    unmarked = {name: value for name, value in block.items() if name != "cache_control"}
    text = str(unmarked.get("text", "")) if unmarked.get("type") == "text" else json.dumps(unmarked)
    return _key([role, unmarked]), text, "cache_control" in block


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
    # "max_tokens": the reply was cut off at the output limit.
    stop_reason: str | None = None


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
    if EDITOR_TOOL_NAME in request.tool_names and not request.forced_tool:
        return _editing_reply(request, delay)
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
    if tool == "submit_review":
        return ToolReply(
            text="Checking the changes against the plan: the function is typed and the test covers it.\n",
            input={"pass": True, "findings": []},
            chunk_delay=delay,
        )
    if tool == "record_lessons":
        return ToolReply(
            text="Keeping what holds beyond this change.\n",
            input={"lessons": _lessons_said(request)},
            chunk_delay=delay,
        )
    return TextReply(text=_chat_answer(request), chunk_delay=delay)


def _lessons_said(request: MessagesRequest) -> list[str]:
    """The demo's distillation: what was said (the prompt's bullet lines), at most three,
    as sentences."""
    said = [line[2:].strip() for line in request.message_texts[-1].splitlines() if line.startswith("- ")]
    return [(text if text.endswith(".") else f"{text}.")[:400] for text in said if text][:3]


EDITOR_TOOL_NAME = "str_replace_based_edit_tool"
DEMO_FILES = (
    ("src/feature.py", 'def feature() -> str:\n    return "done"\n'),
    (
        "tests/test_feature.py",
        'from src.feature import feature\n\n\ndef test_feature() -> None:\n    assert feature() == "done"\n',
    ),
)


START_SUBTASK_TOOL_NAME = "start_subtask"


def _editing_reply(request: MessagesRequest, delay: float) -> DemoReply:
    """The Coder with the text editor: look around and read the README, as a model
    would before writing; write the demo's two files, each after saying which subtask
    of the plan it begins (when it has the start_subtask tool and the plan has one for
    it); then sum up."""
    steps: list[ToolReply] = [
        ToolReply(name=EDITOR_TOOL_NAME, text=text, input={"command": "view", "path": path}, chunk_delay=delay)
        for text, path in (
            ("Looking at the repository before changing it.\n", "."),
            ("Reading the README.\n", "README.md"),
        )
    ]
    orders = _plan_orders(request) if START_SUBTASK_TOOL_NAME in request.tool_names else []
    for number, (path, text) in enumerate(DEMO_FILES):
        if number < len(orders):
            steps.append(
                ToolReply(
                    name=START_SUBTASK_TOOL_NAME,
                    text=f"Starting subtask {orders[number]}.\n",
                    input={"order": orders[number]},
                    chunk_delay=delay,
                )
            )
        steps.append(
            ToolReply(
                name=EDITOR_TOOL_NAME,
                text=f"Writing {path}.\n",
                input={"command": "create", "path": path, "file_text": text},
                chunk_delay=delay,
            )
        )
    done = len(request.tool_results)
    if done < len(steps):
        return steps[done]
    return TextReply(text="Added feature() in src/feature.py and a test that pins its result down.", chunk_delay=delay)


def _plan_orders(request: MessagesRequest) -> list[int]:
    """The subtasks' orders in the plan the Coder was given (its first message), in order."""
    texts = request.message_texts
    match = re.search(r"^# Plan\n(\[.*?^\])", texts[0] if texts else "", re.MULTILINE | re.DOTALL)
    try:
        plan = json.loads(match.group(1)) if match else []
    except ValueError:
        return []
    orders = [subtask.get("order") for subtask in plan if isinstance(subtask, dict)]
    return sorted(order for order in orders if isinstance(order, int))


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
