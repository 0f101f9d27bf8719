"""What the demo model is asked (``MessagesRequest``), what it can say (``ToolReply``,
``TextReply``), and what it reads out of a request beside the messages: the plan a
Coder was given, the lessons the team taught."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# The tool the Claude CLI adds for ``--json-schema``: its input is the answer.
STRUCTURED_OUTPUT_TOOL = "StructuredOutput"


@dataclass
class MessagesRequest:
    """A ``POST /v1/messages`` as received: the body is the SDK's JSON, unchanged. A
    ``POST /v1/chat/completions`` is read into the same shape (llm/demo/openai_wire.py),
    its body as sent kept in ``wire_body``."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    wire_body: dict[str, Any] | None = None
    # Context editing (llm/demo/context_management.py): the edits applied (None: the
    # request asked for none), and the messages as sent when they cleared something
    # (``body`` then holds what the model read).
    applied_edits: list[dict[str, Any]] | None = None
    received_messages: list[dict[str, Any]] | None = None

    @property
    def chat_completions(self) -> bool:
        """Asked through OpenAI's Chat Completions (and answered in its shape)."""
        return self.wire_body is not None

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
        when the model may choose among tools (a tool-use loop), or the agent's tool the
        Claude CLI's ``StructuredOutput`` stands for (its schema's title: llm/providers/
        claude_cli.py)."""
        if self.forced_tool:
            return self.forced_tool
        for name in self.tool_names:
            if name.startswith("submit_"):
                return name
        title = self.structured_output_schema.get("title")
        return str(title) if title else None

    @property
    def answer_call_name(self) -> str | None:
        """The name the answer's tool call carries: the CLI's ``StructuredOutput`` where
        the request answers through it, else the answer tool's own."""
        if self.answer_tool and not self.forced_tool and self.structured_output_schema:
            return STRUCTURED_OUTPUT_TOOL
        return self.answer_tool

    @property
    def structured_output_schema(self) -> dict[str, Any]:
        """The schema of the Claude CLI's ``StructuredOutput`` tool (``--json-schema``), or {}."""
        for tool in self._list("tools"):
            if isinstance(tool, dict) and tool.get("name") == STRUCTURED_OUTPUT_TOOL:
                schema = tool.get("input_schema")
                return schema if isinstance(schema, dict) else {}
        return {}

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


# The heading and intro of the recalled memories in an agent's system prompt
# (pipelines/agents/recall.py: MEMORIES_HEADING, MEMORIES_INTRO), one "- " line each.
MEMORIES_HEADING = "# What the team taught you"


def lessons_taught(system: str) -> list[str]:
    """The lessons the system prompt's recalled memories hold, in order."""
    start = system.find(MEMORIES_HEADING + "\n")
    if start < 0:
        return []
    lessons = []
    for line in system[start + len(MEMORIES_HEADING) + 1 :].split("\n")[1:]:
        if not line.startswith("- "):
            break
        lessons.append(line[2:].strip())
    return lessons


def plan_orders(request: MessagesRequest) -> list[int]:
    """The subtasks' orders in the plan the Coder was given (its first message), in order."""
    texts = request.message_texts
    match = re.search(r"^# Plan\n(\[.*?^\])", texts[0] if texts else "", re.MULTILINE | re.DOTALL)
    try:
        plan = json.loads(match.group(1)) if match else []
    except ValueError:
        return []
    orders = [subtask.get("order") for subtask in plan if isinstance(subtask, dict)]
    return sorted(order for order in orders if isinstance(order, int))
