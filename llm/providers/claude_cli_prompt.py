"""What the Claude CLI is told and what its answer holds: a request's conversation as one
prompt (the CLI keeps no session between calls; the system prompt goes in a file of its
own), the test command a request allows, and the tool input in an answer where the
CLI gave no ``structured_output`` (the JSON object in its text)."""

from __future__ import annotations

import json
import re
from typing import Any

from .base import LLMRequest

_FENCE = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.S)


def answer_prompt(request: LLMRequest) -> str:
    """The conversation so far and the last message, with the tool to answer with, as one
    prompt (the system prompt is the CLI's own: ``--system-prompt-file``)."""
    # The conversation so far is in the prompt: each call has a config folder of its
    # own, removed afterwards, so there is no earlier session to --resume.
    *earlier, last = request.messages or [{"role": "user", "content": ""}]
    history = "\n\n".join(f"{str(m.get('role', 'user')).title()}: {message_text(m.get('content'))}" for m in earlier)
    parts = [
        f"The conversation so far:\n\n{history}" if history else "",
        message_text(last.get("content")),
    ]
    if request.tool is not None:
        parts.append(
            f"Answer with the StructuredOutput tool: its input is the input of the tool `{request.tool.name}` "
            f"({request.tool.description})."
        )
    return "\n\n".join(part for part in parts if part)


def message_text(content: Any) -> str:
    """A message's text: a string, or the text blocks of a list of content blocks."""
    if isinstance(content, list):
        return "\n".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return str(content or "")


def answer_json(text: str) -> dict[str, Any] | None:
    """The JSON object in an answer: a fenced one, else from the first "{" to the last "}"."""
    match = _FENCE.search(text)
    candidates = [match.group(1)] if match else []
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            parsed = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return None


def request_test_command(request: LLMRequest) -> str:
    """The project's test command (the commands a request allows, one after the other)."""
    commands = [command.strip() for command in request.allowed_commands if command.strip()]
    return " && ".join(f"({command})" for command in commands) if len(commands) > 1 else "".join(commands)
