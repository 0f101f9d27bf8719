"""The Anthropic Messages API through the official SDK, streamed.

The SDK's own retries are off (``max_retries=0``): the pipeline owns the retry policy
(backoff 2 s, 4 s, 8 s, then pause), and the two would multiply.
"""

from __future__ import annotations

import copy
import json
import logging
import queue
import threading
from typing import Any

import anthropic
import httpx2

from llm.context_editing import API_BETA, API_EDIT_TYPE, ContextCleared

from .base import (
    CancelCheck,
    Cancelled,
    ChunkCallback,
    LLMRequest,
    LLMResult,
    ProviderError,
    ToolCall,
    retry_after_seconds,
)

logger = logging.getLogger(__name__)

# Each thread's Anthropic client (AnthropicProvider._client).
_thread_clients = threading.local()

KEY_REJECTED = "The Anthropic API key was rejected. Check the key in your settings or the server's ANTHROPIC_API_KEY."
# Pipelines refuse to start a run without a key (pipelines.runs.services); chat and note
# summaries meet this one.
NO_API_KEY = "No Anthropic API key is configured: set ANTHROPIC_API_KEY on the server."
PERMISSION_DENIED = "The Anthropic API key is not allowed to use this model or feature."
CANCEL_POLL_SECONDS = 0.2

RETRYABLE_ERROR_TYPES = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}


def _retry_after(exc: anthropic.APIStatusError) -> float | None:
    return retry_after_seconds(exc.response.headers if exc.response is not None else {})


def _error_type(exc: anthropic.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    return str((error or {}).get("type") or getattr(exc, "type", "") or "")


def _error_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    return str((error or {}).get("message") or "")


def classify(exc: Exception) -> ProviderError:
    """Turn an SDK exception into a ProviderError a person can act on."""
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderError("The Anthropic API did not answer in time.", retryable=True)
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError("Could not reach the Anthropic API.", retryable=True)
    if isinstance(exc, anthropic.AuthenticationError):
        return ProviderError(KEY_REJECTED, retryable=False)
    if isinstance(exc, anthropic.PermissionDeniedError):
        return ProviderError(PERMISSION_DENIED, retryable=False)
    if isinstance(exc, anthropic.RateLimitError):
        return ProviderError("The Anthropic API rate limit was hit.", retryable=True, retry_after=_retry_after(exc))
    if isinstance(exc, anthropic.APIStatusError):
        error_type = _error_type(exc)
        # The API's own sentence, not the SDK's "Error code: 400 - {'type': 'error', …}".
        message = _error_message(exc) or getattr(exc, "message", str(exc))
        # A mid-stream `event: error` arrives as a plain APIStatusError with status 200.
        if exc.status_code >= 500 or exc.status_code == 408 or error_type in RETRYABLE_ERROR_TYPES:
            label = "overloaded" if error_type == "overloaded_error" else f"failing ({exc.status_code})"
            return ProviderError(f"The Anthropic API is {label}.", retryable=True, retry_after=_retry_after(exc))
        if isinstance(exc, anthropic.NotFoundError):
            return ProviderError(f"The Anthropic API does not know this model: {message}", retryable=False)
        return ProviderError(f"The Anthropic API refused the request: {message}", retryable=False)
    return ProviderError(f"Unexpected error talking to the Anthropic API: {exc}", retryable=False)


class AnthropicProvider:
    """Streams calls to the Messages API (or any compatible endpoint via base_url)."""

    supports_tools = True
    # The editing loop is driven by the caller (pipelines/agents/coder.py) with tools.
    edits_worktree = False

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 120.0,
        label: str = "Anthropic",
        prompt_caching: bool = True,
    ) -> None:
        self.label = label
        self.prompt_caching = prompt_caching
        self._api_key = api_key
        self._base_url = base_url or None
        self._timeout = timeout

    def _client(self) -> anthropic.Anthropic:
        """The calling thread's client for this key and endpoint, kept between its calls.

        Building a client costs ~25 ms of CPU (an SSL context loading the CA bundle, even
        for plain http), a tenth of a worker's CPU with dozens of runs on its threads,
        and its connection pool keeps the API's TLS connection open from one call to the
        next. One per thread, not one for the process: a call left early closes its
        client, which also aborts a request still waiting for its response headers, and
        that must not cut off the other threads' streams. The thread's next call then
        builds a new one."""
        key = (self._api_key, self._base_url, self._timeout)
        kept: tuple[tuple[str, str | None, float], anthropic.Anthropic] | None = getattr(_thread_clients, "kept", None)
        if kept is not None and kept[0] == key and not kept[1].is_closed():
            return kept[1]
        if kept is not None:
            kept[1].close()  # another key (runs with their own keys take turns on a thread)
        client = anthropic.Anthropic(
            api_key=self._api_key,
            base_url=self._base_url,
            max_retries=0,
            timeout=httpx2.Timeout(self._timeout, connect=10.0),
        )
        _thread_clients.kept = (key, client)
        return client

    def complete(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        """Stream one call. Network I/O runs in a helper thread that only feeds a queue;
        this thread hands chunks to ``on_chunk`` and checks ``should_cancel`` at least
        every CANCEL_POLL_SECONDS, so a cancel is obeyed even while the server is
        silent (a request still waiting for its headers cannot be interrupted
        otherwise). The abandoned call's thread ends at its own timeout."""
        if should_cancel():
            raise Cancelled
        if not self._api_key:
            raise ProviderError(NO_API_KEY, retryable=False)
        client = self._client()
        feed: queue.Queue[tuple[str, Any]] = queue.Queue()
        abort = threading.Event()
        caller = threading.Thread(
            target=self._stream_into,
            args=(client, request_kwargs(request, cache=self.prompt_caching and request.cache), feed, abort),
            name="llm-stream",
            daemon=True,
        )
        caller.start()
        text_parts: list[str] = []
        # Streamed tool input per content block index, parsed strictly at the end.
        json_parts: dict[int, list[str]] = {}
        # Only the answer's input streams into the log: a tool call the agent makes on
        # the way (an edit, a file viewed) is shown once, by the loop that runs it.
        answer_blocks: set[int] = set()
        try:
            while True:
                try:
                    kind, value = feed.get(timeout=CANCEL_POLL_SECONDS)
                except queue.Empty:
                    kind, value = "", None
                if should_cancel():
                    abort.set()
                    client.close()
                    raise Cancelled
                if kind == "text":
                    text_parts.append(value)
                    on_chunk(value)
                elif kind == "tool":
                    index, name = value
                    if request.tool is not None and name == request.tool.name:
                        answer_blocks.add(index)
                elif kind == "json":
                    index, piece = value
                    json_parts.setdefault(index, []).append(piece)
                    if index in answer_blocks:
                        on_chunk(piece)
                elif kind == "error":
                    raise value
                elif kind == "done":
                    message = value
                    break
        except BaseException:
            # Leaving early for any reason (a cancel, or should_cancel or on_chunk
            # failing because the database went away) abandons the call: stop its
            # stream, or it runs on, and is paid for, to the end.
            abort.set()
            client.close()
            raise
        raw_by_block = {index: "".join(parts) for index, parts in json_parts.items()}
        tool_calls, content = _tool_calls(message, raw_by_block)
        answer = _answer_call(tool_calls, request)
        raw_tool_input = raw_by_block.get(answer[0], "") if answer else "".join(raw_by_block.values())
        return LLMResult(
            text="".join(text_parts),
            tool_input=answer[1].input if answer else None,
            raw_tool_input=raw_tool_input,
            input_tokens=message.usage.input_tokens,
            output_tokens=message.usage.output_tokens,
            model=message.model,
            stop_reason=message.stop_reason,
            tool_calls=[call for _, call in tool_calls],
            content=content,
            cache_creation_input_tokens=getattr(message.usage, "cache_creation_input_tokens", None) or 0,
            cache_read_input_tokens=getattr(message.usage, "cache_read_input_tokens", None) or 0,
            context_cleared=_context_cleared(message),
        )

    @staticmethod
    def _stream_into(
        client: anthropic.Anthropic, kwargs: dict[str, Any], feed: queue.Queue[tuple[str, Any]], abort: threading.Event
    ) -> None:
        # Context management is a beta: its parameter and header go through the SDK's beta
        # messages, whose stream carries the same events.
        messages = client.beta.messages if "context_management" in kwargs else client.messages
        try:
            with messages.stream(**kwargs) as stream:
                for event in stream:
                    if abort.is_set():
                        return
                    if event.type == "content_block_start" and event.content_block.type == "tool_use":
                        feed.put(("tool", (event.index, event.content_block.name)))
                    elif event.type == "content_block_delta":
                        if event.delta.type == "text_delta":
                            feed.put(("text", event.delta.text))
                        elif event.delta.type == "input_json_delta":
                            feed.put(("json", (event.index, event.delta.partial_json)))
                feed.put(("done", stream.get_final_message()))
        except anthropic.APIError as exc:
            feed.put(("error", classify(exc)))
        except httpx2.TimeoutException:
            # A stream that stalls longer than the read timeout: the same as no answer.
            feed.put(("error", ProviderError("The Anthropic API did not answer in time.", retryable=True)))
        except httpx2.HTTPError as exc:
            feed.put(("error", ProviderError(f"The connection to the Anthropic API broke off: {exc}", retryable=True)))
        except Exception as exc:
            logger.exception("Unexpected error in the Anthropic stream")
            feed.put(("error", ProviderError(f"Unexpected error talking to the Anthropic API: {exc}", retryable=False)))


CACHE_CONTROL = {"type": "ephemeral"}


def request_kwargs(request: LLMRequest, *, cache: bool) -> dict[str, Any]:
    """The Messages API arguments of ``request``.

    With ``cache``, prompt-caching breakpoints (the API allows four): the last tool
    definition, the system prompt (sent as a list of text blocks for it), the last
    content block of the last message, and, from the second turn of a conversation on,
    the last block of the message before the latest assistant reply: where the previous
    turn's last breakpoint was. The prefix up to each is cached for five minutes, so each
    tool turn of a conversation reads everything before its new messages from the cache.
    The API looks for an earlier cached prefix only about 20 blocks back from a
    breakpoint, so without the previous turn's breakpoint a reply with more than ten tool
    calls (a tool_use and a tool_result block each) would write the whole conversation
    to the cache again. (Prefixes shorter than the model's minimum, 1,024 tokens for
    Sonnet, 4,096 for Opus 4.5 and Haiku 4.5, are simply not cached.) The request's own
    messages are not changed."""
    messages = request.messages
    system: str | list[dict[str, Any]] = request.system
    tools, tool_choice = request.api_tools()
    if cache:
        if tools:
            tools = [*tools[:-1], {**tools[-1], "cache_control": CACHE_CONTROL}]
        if request.system:
            system = [{"type": "text", "text": request.system, "cache_control": CACHE_CONTROL}]
        messages = _with_last_blocks_cached(messages)
    kwargs: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "system": system,
        "messages": messages,
    }
    if tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = tool_choice
    if request.context_editing is not None:
        kwargs["betas"] = [API_BETA]
        kwargs["context_management"] = {"edits": [request.context_editing.api_edit()]}
    return kwargs


def _context_cleared(message: Any) -> ContextCleared | None:
    """What the API's context editing cleared from the prompt (its ``applied_edits``)."""
    management = getattr(message, "context_management", None)
    edits = [
        edit for edit in getattr(management, "applied_edits", None) or () if getattr(edit, "type", "") == API_EDIT_TYPE
    ]
    tool_uses = sum(getattr(edit, "cleared_tool_uses", 0) or 0 for edit in edits)
    if not tool_uses:
        return None
    tokens = sum(getattr(edit, "cleared_input_tokens", 0) or 0 for edit in edits)
    return ContextCleared(tool_uses=tool_uses, tokens=tokens)


def _with_last_blocks_cached(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with a breakpoint on the last content block of the last message and,
    when the conversation has gone round (user, assistant, user), of the message before
    the last assistant reply: the previous request's last message."""
    marked = [len(messages) - 1]
    if len(messages) >= 3 and messages[-2].get("role") == "assistant":
        marked.append(len(messages) - 3)
    return [_last_block_cached(message) if index in marked else message for index, message in enumerate(messages)]


def _last_block_cached(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with a breakpoint on its last content block (a string content becomes
    one text block to carry it)."""
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return message
        blocks: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list) and content and isinstance(content[-1], dict):
        blocks = copy.copy(content)
    else:
        return message
    blocks[-1] = {**blocks[-1], "cache_control": CACHE_CONTROL}
    return {**message, "content": blocks}


def _strict_input(raw: str, lenient: Any) -> dict[str, Any] | None:
    """A tool call's input, parsed strictly.

    The SDK parses streamed tool input leniently (a truncated ``{"a": [1, 2`` comes
    back as ``{"a": [1, 2]}``); the agents must see broken output as broken, so the
    streamed JSON is parsed again with ``json.loads``.
    """
    if raw:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return lenient if isinstance(lenient, dict) else None


def _tool_calls(message: Any, raw_by_block: dict[int, str]) -> tuple[list[tuple[int, ToolCall]], list[dict[str, Any]]]:
    """The reply's tool calls (with their block index) and its content blocks in the
    form the next request of a tool-use loop sends back."""
    calls: list[tuple[int, ToolCall]] = []
    content: list[dict[str, Any]] = []
    for index, block in enumerate(message.content):
        if block.type == "text":
            content.append({"type": "text", "text": block.text})
        elif block.type == "tool_use":
            call = ToolCall(id=block.id, name=block.name, input=_strict_input(raw_by_block.get(index, ""), block.input))
            calls.append((index, call))
            content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input or {}})
    return calls, content


def _answer_call(calls: list[tuple[int, ToolCall]], request: LLMRequest) -> tuple[int, ToolCall] | None:
    """The call of the request's answer tool (any call when the request names none)."""
    for index, call in calls:
        if request.tool is None or call.name == request.tool.name:
            return index, call
    return None
