"""What the Claude CLI says (``--output-format stream-json --verbose``): its events, written
to the live log as they arrive, and its result event, made an LLMResult or a clear error.

The real CLI (npm ``@anthropic-ai/claude-code``, pinned in tools/claude-cli) exits 1 on a
failure and still prints its result event (``is_error: true``: "Not logged in · Please
run /login", ``subtype`` ``error_max_turns``…): the result is read first, the exit
status only where there is none. While the API is overloaded it retries on its own and
says so with ``{"type": "system", "subtype": "api_retry"}`` events: the live log shows
each retry, so a run is not silent for minutes.
"""

from __future__ import annotations

import json
from typing import Any

from .base import ChunkCallback, ProviderError, ToolCall

OUT_OF_TURNS_SUBTYPE = "error_max_turns"
# The tool the CLI adds for ``--json-schema``: its input is the answer, not a step to show.
STRUCTURED_OUTPUT_TOOL = "StructuredOutput"
NOT_LOGGED_IN = (
    "Error: the Claude CLI is not logged in. Set ANTHROPIC_API_KEY in the server's settings, give the server "
    "a token as CLAUDE_CODE_OAUTH_TOKEN (`claude setup-token`), or run `claude` once as the server's user."
)
OUT_OF_TURNS = "Error: the Claude CLI ran out of turns ({turns}) before it finished."
CLI_FAILED = "Error: the Claude CLI failed{why}: {detail}"
CLI_EXITED = "Error: the Claude CLI exited with {code}: {detail}"
RETRY_LINE = "\n[The API is busy ({why}): the Claude CLI retries, attempt {attempt} of {limit}, in {delay:.1f} s]\n"
DETAIL_LIMIT = 300
# API statuses worth another try later (the CLI already retried them itself).
RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class CliEvents:
    """The CLI's events as they come: the assistant's text, each tool call (``→ Edit
    {"file_path": …}``) and the first line of its result, each API retry; the result
    event is kept. ``structured``: the ``StructuredOutput`` call's input (``--json-schema``)."""

    def __init__(self, on_chunk: ChunkCallback) -> None:
        self.on_chunk = on_chunk
        self.model = ""
        self.texts: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.content: list[dict[str, Any]] = []
        self.retries = 0
        self.structured: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None

    def take(self, line: str) -> None:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return  # not an event (a stray line of output)
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            self.model = str(event.get("model") or "")
        elif kind == "system" and event.get("subtype") == "api_retry":
            self._retry(event)
        elif kind == "assistant":
            for block in _blocks(event):
                self._assistant_block(block)
        elif kind == "user":
            for block in _blocks(event):
                if block.get("type") == "tool_result" and not self._answered(block):
                    text = _result_text(block.get("content")) or "(empty)"
                    first = text.splitlines()[0][:200] if text.strip() else "(empty)"
                    self.on_chunk(f"  {'error: ' if block.get('is_error') else ''}{first}\n")
        elif kind == "result":
            self.result = event

    def _retry(self, event: dict[str, Any]) -> None:
        self.retries += 1
        status = event.get("error_status")
        why = " ".join(str(part) for part in (status, event.get("error")) if part) or "no answer"
        delay = event.get("retry_delay_ms")
        self.on_chunk(
            RETRY_LINE.format(
                why=why[:100],
                attempt=_number(event.get("attempt"), self.retries),
                limit=_number(event.get("max_retries"), 0) or "?",
                delay=(delay / 1000) if isinstance(delay, int | float) else 0.0,
            )
        )

    def _assistant_block(self, block: dict[str, Any]) -> None:
        self.content.append(block)
        if block.get("type") == "text" and block.get("text"):
            self.texts.append(str(block["text"]))
            self.on_chunk(str(block["text"]))
        elif block.get("type") == "tool_use":
            tool_input = block.get("input") if isinstance(block.get("input"), dict) else None
            if block.get("name") == STRUCTURED_OUTPUT_TOOL:
                self.structured = tool_input
                return
            self.tool_calls.append(ToolCall(str(block.get("id", "")), str(block.get("name", "")), tool_input))
            arguments = json.dumps(tool_input or {}, ensure_ascii=False)[:200]
            self.on_chunk(f"\n→ {block.get('name', '?')} {arguments}\n")

    def _answered(self, block: dict[str, Any]) -> bool:
        """The CLI's acknowledgement of the structured answer (not a step to show)."""
        return any(
            block.get("tool_use_id") == item.get("id") and item.get("name") == STRUCTURED_OUTPUT_TOOL
            for item in self.content
            if item.get("type") == "tool_use"
        )

    def failure(self, *, returncode: int | None, stderr: str, out_of_turns_ok: bool) -> ProviderError | None:
        """What went wrong, said briefly (None: nothing). The result event comes first:
        the real CLI exits 1 and prints it on a failure."""
        result = self.result
        if result is None:
            lines = stderr.strip().splitlines()
            detail = _brief(lines[-1] if lines else "no result")
            return ProviderError(CLI_EXITED.format(code=returncode, detail=detail), retryable=False)
        subtype = str(result.get("subtype") or "")
        if subtype == OUT_OF_TURNS_SUBTYPE:
            if out_of_turns_ok:
                return None
            return ProviderError(OUT_OF_TURNS.format(turns=result.get("num_turns") or "?"), retryable=False)
        if not result.get("is_error") and returncode in (0, None):
            return None
        detail = _brief(str(result.get("result") or "") or "; ".join(map(str, result.get("errors") or [])))
        if "not logged in" in detail.lower() or "/login" in detail:
            return ProviderError(NOT_LOGGED_IN, retryable=False)
        status = result.get("api_error_status")
        why = f" ({subtype})" if subtype and subtype != "success" else ""
        return ProviderError(
            CLI_FAILED.format(why=why, detail=detail or f"it exited with {returncode}"),
            retryable=isinstance(status, int) and status in RETRYABLE_STATUSES,
        )


def _number(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int | float) else default


def _brief(text: str) -> str:
    """The first line of ``text``, at most DETAIL_LIMIT characters."""
    first = (text.strip().splitlines() or [""])[0].strip()
    return first if len(first) <= DETAIL_LIMIT else first[: DETAIL_LIMIT - 1] + "…"


def _blocks(event: dict[str, Any]) -> list[dict[str, Any]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""
