"""Context editing: old tool results of a long agent conversation cleared, the latest
kept, so each turn stops paying to read every file the agent viewed long ago.

One rule, three places. With the Anthropic provider the API applies it (the
``context-management-2025-06-27`` beta, a ``clear_tool_uses_20250919`` edit,
``ContextEditing.api_edit``); an OpenAI-compatible endpoint gets the same rule applied to
the messages before they are sent (``clear_old_tool_results``); and the fake Anthropic
server of the tests and benches (llm/demo/server.py) applies it as its model of the API.

The rule: once the prompt reaches ``trigger_tokens``, the oldest tool results are
replaced by a one-line stub, in batches of at least ``clear_at_least`` tokens, until the
prompt is under the trigger again; the latest ``keep_tool_uses`` results are never
cleared, nor the results of ``exclude_tools``, nor (client side) an edit's result. It is
worked out afresh from the whole conversation on every request, so a batch once cleared
is cleared the same way on every later turn: the prompt changes only when a new batch
goes, and in between each turn reads the conversation so far from the prompt cache. The
batch size is what makes clearing pay: each batch invalidates the cache from its first
cleared result on, and what follows is written to the cache again (1.25x).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

API_BETA = "context-management-2025-06-27"
API_EDIT_TYPE = "clear_tool_uses_20250919"
# The text editor's commands that change a file: their results are kept (client side).
EDIT_COMMANDS = frozenset({"create", "str_replace", "insert"})
CLEARED_VIEW = "[cleared to save context: view {path} again if needed]"
CLEARED_CALL = "[cleared to save context: call {name} again if needed]"


def estimate_tokens(text: str) -> int:
    """About four characters a token (what the fake server counts too)."""
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class ContextEditing:
    trigger_tokens: int
    keep_tool_uses: int
    clear_at_least: int
    exclude_tools: tuple[str, ...] = ()

    def api_edit(self) -> dict[str, Any]:
        """The ``clear_tool_uses_20250919`` edit of the Messages API's ``context_management``."""
        edit: dict[str, Any] = {
            "type": API_EDIT_TYPE,
            "trigger": {"type": "input_tokens", "value": self.trigger_tokens},
            "keep": {"type": "tool_uses", "value": self.keep_tool_uses},
        }
        if self.clear_at_least:
            edit["clear_at_least"] = {"type": "input_tokens", "value": self.clear_at_least}
        if self.exclude_tools:
            edit["exclude_tools"] = list(self.exclude_tools)
        return edit

    @classmethod
    def from_api_edit(cls, edit: dict[str, Any]) -> ContextEditing:
        """The rule an API ``clear_tool_uses_20250919`` edit asks for (the API's
        defaults where it says nothing: 100,000 tokens, 3 tool uses)."""

        def value(name: str, default: int) -> int:
            field = edit.get(name)
            return int(field.get("value", default)) if isinstance(field, dict) else default

        return cls(
            trigger_tokens=value("trigger", 100_000),
            keep_tool_uses=value("keep", 3),
            clear_at_least=value("clear_at_least", 0),
            exclude_tools=tuple(str(name) for name in edit.get("exclude_tools") or ()),
        )


@dataclass(frozen=True)
class ContextCleared:
    """What one request's context editing cleared: tool results and their tokens."""

    tool_uses: int
    tokens: int

    def describe(self) -> str:
        plural = "" if self.tool_uses == 1 else "s"
        return f"Context: cleared {self.tool_uses:,} old tool result{plural} ({self.tokens:,} tokens)"


def client_stub(call: dict[str, Any]) -> str:
    """The one line that replaces a cleared result: how to get it back."""
    tool_input = call.get("input")
    if isinstance(tool_input, dict) and tool_input.get("command") == "view" and tool_input.get("path"):
        return CLEARED_VIEW.format(path=tool_input["path"])
    return CLEARED_CALL.format(name=call.get("name") or "the tool")


def is_edit(call: dict[str, Any]) -> bool:
    tool_input = call.get("input")
    return isinstance(tool_input, dict) and tool_input.get("command") in EDIT_COMMANDS


def clear_old_tool_results(
    messages: list[dict[str, Any]],
    editing: ContextEditing,
    *,
    prompt_tokens: int,
    stub: Callable[[dict[str, Any]], str] = client_stub,
    keep_edits: bool = True,
) -> tuple[list[dict[str, Any]], ContextCleared | None]:
    """``messages`` with old tool results cleared by the rule (the module's docstring)
    when the prompt (``prompt_tokens``, the whole request's) has reached the trigger,
    and what was cleared (None: nothing). The messages given are not changed."""
    if prompt_tokens < editing.trigger_tokens:
        return messages, None
    calls = _tool_uses(messages)
    results = [
        (index, position, block)
        for index, message in enumerate(messages)
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for position, block in enumerate(message["content"])
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    kept_latest = len(results) - max(0, editing.keep_tool_uses)
    candidates: list[tuple[int, int, str, int]] = []  # (message, block, stub, tokens saved)
    for order, (index, position, block) in enumerate(results):
        call = calls.get(str(block.get("tool_use_id")), {})
        if order >= kept_latest or call.get("name") in editing.exclude_tools or (keep_edits and is_edit(call)):
            continue
        line = stub(call)
        saved = estimate_tokens(_result_text(block)) - estimate_tokens(line)
        if saved > 0:
            candidates.append((index, position, line, saved))
    remaining, taken = prompt_tokens, 0
    while remaining >= editing.trigger_tokens and taken < len(candidates):
        batch_end, batch = taken, 0
        while batch_end < len(candidates) and (batch < editing.clear_at_least or batch_end == taken):
            batch += candidates[batch_end][3]
            batch_end += 1
        if batch < editing.clear_at_least:
            break  # not enough left to clear to be worth the cache it would cost
        taken, remaining = batch_end, remaining - batch
    if not taken:
        return messages, None
    edited = [dict(message) for message in messages]
    for index, position, line, _ in candidates[:taken]:
        content = list(edited[index]["content"])
        block = {key: value for key, value in content[position].items() if key != "is_error"}
        content[position] = {**block, "content": line}
        edited[index]["content"] = content
    return edited, ContextCleared(tool_uses=taken, tokens=sum(saved for *_, saved in candidates[:taken]))


def _tool_uses(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        str(block.get("id")): block
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    }


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) and part.get("type") == "text" else json.dumps(part)
            for part in content
        )
    return ""


def clear_before_sending(
    system: str, messages: list[dict[str, Any]], editing: ContextEditing
) -> tuple[list[dict[str, Any]], ContextCleared | None]:
    """The client's side of the rule: ``messages`` as they are sent after ``system``, old
    tool results cleared (each replaced by a stub that says how to get it back; an edit's
    result kept), with the prompt's size estimated here."""
    prompt_tokens = estimate_tokens(system) + messages_tokens(messages)
    return clear_old_tool_results(messages, editing, prompt_tokens=prompt_tokens)


def messages_tokens(messages: list[dict[str, Any]]) -> int:
    """A client's estimate of the messages' tokens (text as text, other blocks as JSON)."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += estimate_tokens(content)
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "text":
                    total += estimate_tokens(str(block.get("text", "")))
                else:
                    total += estimate_tokens(json.dumps(block, ensure_ascii=False))
    return total


def context_editing_configured() -> ContextEditing | None:
    """The rule the settings ask for (``CONTEXT_EDITING_*``), or None when it is off
    (``CONTEXT_EDITING_TRIGGER_TOKENS=0``)."""
    from django.conf import settings

    if not settings.CONTEXT_EDITING_TRIGGER_TOKENS:
        return None
    return ContextEditing(
        trigger_tokens=settings.CONTEXT_EDITING_TRIGGER_TOKENS,
        keep_tool_uses=settings.CONTEXT_EDITING_KEEP_TOOL_USES,
        clear_at_least=settings.CONTEXT_EDITING_CLEAR_AT_LEAST,
        exclude_tools=tuple(settings.CONTEXT_EDITING_EXCLUDE_TOOLS),
    )
