"""An ``LLMRequest`` (the Anthropic Messages shape the agents speak: content blocks,
``tool_use`` / ``tool_result``, server tools) as Chat Completions arguments, and a
streamed reply's pieces back as the ``LLMResult`` the agents read.

Kept apart from the client (openai_compatible.py) because both directions are pure data:
the demo server (llm/demo/openai_wire.py) does the reverse of the request half.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .base import LLMRequest, Tool, ToolCall

# Anthropic's text editor (a tool whose schema the API defines) offered as a plain
# function with the same name and input, so the Coder's dispatch (repos/coder_tools.py)
# runs the same commands whichever provider asked for them.
EDITOR_TOOL_NAME = "str_replace_based_edit_tool"
EDITOR_FUNCTION = Tool(
    name=EDITOR_TOOL_NAME,
    description=(
        "View, create and edit files of the working tree. Commands: `view` (a file with line numbers, or a "
        "folder's contents; `view_range` [start, end], 1-based, end -1 = to the end), `create` (`file_text`), "
        "`str_replace` (`old_str` must match exactly once, whitespace included; `new_str`), `insert` "
        "(`insert_line`: the line after which to insert, 0 = the top; `new_str`). Paths are relative to the "
        "working tree."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
            "path": {"type": "string", "description": "A path relative to the working tree."},
            "file_text": {"type": "string", "description": "create: the whole file."},
            "old_str": {"type": "string", "description": "str_replace: the exact text to replace."},
            "new_str": {"type": "string", "description": "str_replace, insert: the new text."},
            "insert_line": {"type": "integer", "description": "insert: the line after which to insert (0 = top)."},
            "view_range": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "view: [start, end] lines, 1-based; end -1 = to the end.",
            },
        },
        "required": ["command", "path"],
    },
)

# Chat Completions' finish_reason as the agents know Anthropic's stop_reason.
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def _function(tool: Tool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
    }


def _server_tool_function(tool: dict[str, Any]) -> Tool:
    if str(tool.get("type", "")).startswith("text_editor_") or tool.get("name") == EDITOR_TOOL_NAME:
        return EDITOR_FUNCTION
    raise ValueError(f"No OpenAI-compatible form of the server tool {tool.get('name') or tool.get('type')!r}.")


def chat_tools(request: LLMRequest) -> tuple[list[dict[str, Any]], str | dict[str, Any] | None]:
    """The request's ``tools`` and ``tool_choice`` as Chat Completions takes them: the
    same choice as the Messages API's (``LLMRequest.api_tools``), every tool a function."""
    tools = [_server_tool_function(tool) for tool in request.server_tools] + list(request.explore_tools)
    if request.tool is None:
        return [_function(tool) for tool in tools], ("auto" if tools else None)
    tools.append(request.tool)
    functions = [_function(tool) for tool in tools]
    if len(tools) > 1 and not request.force_answer:
        return functions, "required"
    return functions, {"type": "function", "function": {"name": request.tool.name}}


def _text_of(content: Any) -> str:
    """A tool result's or message's content as text (text blocks joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", "")) for block in content if isinstance(block, dict) and block.get("type") == "text"
        )
    return "" if content is None else str(content)


def _user_part(block: dict[str, Any]) -> dict[str, Any] | None:
    if block.get("type") == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    source = block.get("source")
    if block.get("type") == "image" and isinstance(source, dict) and source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
        return {"type": "image_url", "image_url": {"url": url}}
    return None


def _assistant_message(content: Any) -> dict[str, Any]:
    if not isinstance(content, list):
        return {"role": "assistant", "content": _text_of(content)}
    text = "".join(str(block.get("text", "")) for block in content if block.get("type") == "text")
    calls = [
        {
            "id": str(block.get("id", "")),
            "type": "function",
            "function": {"name": str(block.get("name", "")), "arguments": json.dumps(block.get("input") or {})},
        }
        for block in content
        if block.get("type") == "tool_use"
    ]
    # Content may be null only beside tool calls.
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def _user_messages(content: Any) -> list[dict[str, Any]]:
    """A user message; its ``tool_result`` blocks become ``tool`` messages, which must
    come right after the assistant's calls, so they go first."""
    if not isinstance(content, list):
        return [{"role": "user", "content": _text_of(content)}]
    messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            text = _text_of(block.get("content"))
            if block.get("is_error"):
                text = f"Error: {text}"
            messages.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text})
        else:
            part = _user_part(block)
            if part is not None:
                parts.append(part)
    if parts:
        only_text = all(part["type"] == "text" for part in parts)
        body: Any = "\n".join(part["text"] for part in parts) if only_text else parts
        messages.append({"role": "user", "content": body})
    return messages


def chat_messages(request: LLMRequest) -> list[dict[str, Any]]:
    """The system prompt and the conversation as Chat Completions messages."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": request.system}] if request.system else []
    for message in request.messages:
        if message.get("role") == "assistant":
            messages.append(_assistant_message(message.get("content")))
        else:
            messages.extend(_user_messages(message.get("content")))
    return messages


def chat_kwargs(request: LLMRequest) -> dict[str, Any]:
    """The ``chat.completions.create`` arguments of ``request``, streamed with usage.

    ``max_tokens``, not ``max_completion_tokens``: the servers this is for (vLLM, Ollama,
    llama.cpp, LM Studio, proxies) take the older name, and OpenAI's chat models still do."""
    kwargs: dict[str, Any] = {
        "model": request.model,
        "messages": chat_messages(request),
        "max_tokens": request.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tools, tool_choice = chat_tools(request)
    if tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = tool_choice
    return kwargs


@dataclass
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamedReply:
    """A reply assembled from its chunks: text, tool calls by index, finish, usage."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _CallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    def add_call_delta(self, index: int, *, id: str | None, name: str | None, arguments: str | None) -> _CallParts:
        parts = self.calls.setdefault(index, _CallParts())
        parts.id = parts.id or (id or "")
        parts.name = parts.name or (name or "")
        if arguments:
            parts.arguments.append(arguments)
        return parts

    def tool_calls(self) -> list[ToolCall]:
        """The calls in index order; broken JSON arguments give ``input`` None, as the
        Anthropic provider's do. A server that sends no id gets one made up (the next
        request must name the call it answers)."""
        calls = []
        for position, index in enumerate(sorted(self.calls)):
            parts = self.calls[index]
            raw = "".join(parts.arguments)
            try:
                parsed = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError:
                parsed = None
            calls.append(
                ToolCall(
                    id=parts.id or f"call_{position}",
                    name=parts.name,
                    input=parsed if isinstance(parsed, dict) else None,
                )
            )
        return calls

    def raw_arguments(self, name: str | None) -> str:
        return "".join("".join(parts.arguments) for parts in self.calls.values() if name is None or parts.name == name)

    def stop_reason(self) -> str | None:
        if self.calls and self.finish_reason in ("stop", None):
            # Some servers (Ollama) say "stop" after tool calls: the agents go by the calls.
            return "tool_use"
        return STOP_REASONS.get(self.finish_reason or "", self.finish_reason)

    def content(self, calls: list[ToolCall]) -> list[dict[str, Any]]:
        """The reply as Messages content blocks: what a tool-use loop sends back."""
        blocks: list[dict[str, Any]] = []
        if self.text:
            blocks.append({"type": "text", "text": "".join(self.text)})
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input or {}} for call in calls
        )
        return blocks
