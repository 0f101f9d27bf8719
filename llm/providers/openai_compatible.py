"""Any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, Ollama, llama.cpp's
server, LM Studio, OpenRouter, a LiteLLM proxy) through the official ``openai`` SDK,
streamed, for the built-in agents: the agents' Anthropic-shaped requests are translated
(openai_messages.py), the text editor offered as a function with the same name and
input, so the Coder's tool loop is the same one.

The SDK's own retries are off (``max_retries=0``): the pipeline owns the retry policy.
An endpoint a project owner set (``check_host``) is resolved and checked before every
call like a forge's, and the connection pinned to the checked address; the operator's
own ``OPENAI_BASE_URL`` is trusted.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai

from core.addresses import EndpointRefused, endpoint_host_check, endpoint_is_local
from llm.context_editing import ContextCleared, clear_before_sending

from .base import CancelCheck, Cancelled, ChunkCallback, LLMRequest, LLMResult, ProviderError, retry_after_seconds
from .openai_messages import StreamedReply, chat_kwargs

logger = logging.getLogger(__name__)

# Each thread's client for a trusted endpoint (OpenAICompatibleProvider._client).
_thread_clients = threading.local()

OPENAI_COMPATIBLE = "openai"
CANCEL_POLL_SECONDS = 0.2
# Local servers (Ollama, llama.cpp, vLLM without --api-key) want no key, but the SDK
# refuses to start without one: this one is sent only to a loopback or private address.
LOCAL_PLACEHOLDER_KEY = "no-key-needed"
NO_API_KEY = (
    "No API key for the OpenAI-compatible endpoint {url}: set OPENAI_API_KEY on the server, "
    "or the key in the project's settings."
)
KEY_REJECTED = (
    "The OpenAI-compatible endpoint {url} rejected the API key ({status}). Check OPENAI_API_KEY on the server, "
    "or the key in the project's settings."
)
MODEL_UNKNOWN = (
    "The OpenAI-compatible endpoint {url} does not know the model or path ({detail}). Check the model "
    "(OPENAI_MODEL, or the project's model) and the base URL (OPENAI_BASE_URL, or the project's), "
    "which usually ends in /v1."
)
REQUEST_REFUSED = "The OpenAI-compatible endpoint {url} refused the request: {detail}"
UNREACHABLE = "Could not reach the OpenAI-compatible endpoint {url}."
TIMED_OUT = "The OpenAI-compatible endpoint {url} did not answer in time."


def _retry_after(exc: openai.APIStatusError) -> float | None:
    return retry_after_seconds(exc.response.headers if exc.response is not None else {})


def _detail(exc: openai.APIError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    message = (error or {}).get("message") if isinstance(error, dict) else None
    return str(message or getattr(exc, "message", "") or exc)[:500]


def classify(exc: Exception, *, url: str) -> ProviderError:
    """An SDK exception as a ProviderError a person can act on: rate limits, 5xx and
    broken connections are retried; a refused key, model or request is not."""
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError(TIMED_OUT.format(url=url), retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError(UNREACHABLE.format(url=url), retryable=True)
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return ProviderError(KEY_REJECTED.format(url=url, status=exc.status_code), retryable=False)
    if isinstance(exc, openai.RateLimitError):
        return ProviderError(
            f"The OpenAI-compatible endpoint {url} rate limit was hit.",
            retryable=True,
            retry_after=_retry_after(exc),
        )
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code >= 500 or exc.status_code in (408, 409):
            return ProviderError(
                f"The OpenAI-compatible endpoint {url} is failing ({exc.status_code}).",
                retryable=True,
                retry_after=_retry_after(exc),
            )
        if isinstance(exc, openai.NotFoundError):
            return ProviderError(MODEL_UNKNOWN.format(url=url, detail=_detail(exc)), retryable=False)
        return ProviderError(REQUEST_REFUSED.format(url=url, detail=_detail(exc)), retryable=False)
    if isinstance(exc, openai.APIError):
        # An error event in the middle of a stream: the server gave up on this answer.
        return ProviderError(f"The OpenAI-compatible endpoint {url} failed mid-answer: {_detail(exc)}", retryable=True)
    return ProviderError(f"Unexpected error talking to the OpenAI-compatible endpoint {url}: {exc}", retryable=False)


class PinnedTransport(httpx2.HTTPTransport):
    """Every request to ``address`` whatever its URL's host says (the Host header and
    the TLS server name keep the name)."""

    def __init__(self, address: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._address = address

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": request.url.host}
        request.url = request.url.copy_with(host=self._address)
        return super().handle_request(request)


class OpenAICompatibleProvider:
    """Streams calls to ``{base_url}/chat/completions``."""

    supports_tools = True
    # The editing loop is driven by the caller (pipelines/agents/coder.py) with tools.
    edits_worktree = False

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        timeout: float = 120.0,
        check_host: bool = False,
        local: bool | None = None,
        label: str = "OpenAI-compatible",
    ) -> None:
        self.label = label
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._timeout = timeout
        self._check_host = check_host
        self._local = local

    @property
    def local(self) -> bool:
        """Whether the endpoint is one's own machine or network (no key needed, no
        price per token): said by the operator, else told by its addresses."""
        if self._local is None:
            self._local = endpoint_is_local(self.base_url)
        return self._local

    def _client(self) -> tuple[openai.OpenAI, bool]:
        """The client for this call, and whether it is this call's own (closed after it).

        A trusted endpoint's client is the calling thread's, kept between its calls, as
        the Anthropic provider keeps its own (building one costs an SSL context; its
        pool keeps the connection open). A checked endpoint gets a client of its own per
        call, its connection pinned to the address just checked: a kept one would go on
        trusting an old check."""
        key = self._api_key
        if not key:
            if not self.local:
                raise ProviderError(NO_API_KEY.format(url=self.base_url), retryable=False)
            key = LOCAL_PLACEHOLDER_KEY
        if self._check_host:
            try:
                transport = PinnedTransport(endpoint_host_check(self.base_url))
            except EndpointRefused as exc:
                raise ProviderError(
                    f"The OpenAI-compatible endpoint {self.base_url}: {exc}", retryable=exc.reason == "unresolved"
                ) from None
            return self._build(key, transport), True
        identity = (key, self.base_url, self._timeout)
        kept: tuple[tuple[str, str, float], openai.OpenAI] | None = getattr(_thread_clients, "kept", None)
        if kept is not None and kept[0] == identity and not kept[1].is_closed():
            return kept[1], False
        if kept is not None:
            kept[1].close()  # another endpoint or key (runs of several projects share a thread)
        client = self._build(key, None)
        _thread_clients.kept = (identity, client)
        return client, False

    def _build(self, key: str, transport: httpx2.BaseTransport | None) -> openai.OpenAI:
        return openai.OpenAI(
            api_key=key,
            base_url=self.base_url,
            max_retries=0,
            timeout=httpx2.Timeout(self._timeout, connect=10.0),
            http_client=httpx2.Client(transport=transport, trust_env=False, follow_redirects=False),
        )

    def complete(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        """Stream one call. As in the Anthropic provider, a helper thread reads the
        stream into a queue, and this thread hands chunks on and checks ``should_cancel``
        at least every CANCEL_POLL_SECONDS, so a cancel is obeyed even while the server
        is silent."""
        if should_cancel():
            raise Cancelled
        request, cleared = _context_edited(request)
        try:
            kwargs = chat_kwargs(request)
        except ValueError as exc:
            raise ProviderError(str(exc), retryable=False) from None
        client, own = self._client()
        feed: queue.Queue[tuple[str, Any]] = queue.Queue()
        abort = threading.Event()
        threading.Thread(
            target=self._stream_into, args=(client, kwargs, feed, abort), name="llm-stream", daemon=True
        ).start()
        reply = StreamedReply(model=request.model)
        answer_name = request.tool.name if request.tool is not None else None
        try:
            while True:
                try:
                    kind, value = feed.get(timeout=CANCEL_POLL_SECONDS)
                except queue.Empty:
                    kind, value = "", None
                if should_cancel():
                    raise Cancelled
                if kind == "chunk":
                    self._take(reply, value, on_chunk, answer_name)
                elif kind == "error":
                    raise value
                elif kind == "done":
                    break
        except BaseException:
            # Leaving early abandons the call: stop its stream, or it runs on, and is
            # paid for, to the end (a thread's kept client is then built again).
            abort.set()
            client.close()
            raise
        if own:
            client.close()
        result = self._result(reply, request)
        result.provider = OPENAI_COMPATIBLE
        result.local_endpoint = self.local
        result.context_cleared = cleared
        return result

    @staticmethod
    def _take(reply: StreamedReply, chunk: Any, on_chunk: ChunkCallback, answer_name: str | None) -> None:
        if getattr(chunk, "model", None):
            reply.model = chunk.model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            reply.prompt_tokens = usage.prompt_tokens or 0
            reply.completion_tokens = usage.completion_tokens or 0
            details = getattr(usage, "prompt_tokens_details", None)
            reply.cached_tokens = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
        for choice in chunk.choices or []:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                reply.text.append(delta.content)
                on_chunk(delta.content)
            for call in (delta.tool_calls if delta is not None else None) or []:
                function = call.function
                parts = reply.add_call_delta(
                    call.index,
                    id=call.id,
                    name=function.name if function else None,
                    arguments=function.arguments if function else None,
                )
                # Only the answer's input streams into the log: a tool the agent uses on
                # the way is shown once, by the loop that runs it.
                if function is not None and function.arguments and answer_name and parts.name == answer_name:
                    on_chunk(function.arguments)
            if choice.finish_reason:
                reply.finish_reason = choice.finish_reason

    @staticmethod
    def _result(reply: StreamedReply, request: LLMRequest) -> LLMResult:
        calls = reply.tool_calls()
        answer_name = request.tool.name if request.tool is not None else None
        answer = next((call for call in calls if answer_name is None or call.name == answer_name), None)
        cached = min(reply.cached_tokens, reply.prompt_tokens)
        return LLMResult(
            text="".join(reply.text),
            tool_input=answer.input if answer else None,
            raw_tool_input=reply.raw_arguments(answer_name),
            # Chat Completions counts cached tokens inside prompt_tokens; the agents, like
            # Anthropic, count the uncached rest and the cache reads apart.
            input_tokens=reply.prompt_tokens - cached,
            output_tokens=reply.completion_tokens,
            cache_read_input_tokens=cached,
            model=reply.model,
            stop_reason=reply.stop_reason(),
            tool_calls=calls,
            content=reply.content(calls),
        )

    def _stream_into(
        self, client: openai.OpenAI, kwargs: dict[str, Any], feed: queue.Queue[tuple[str, Any]], abort: threading.Event
    ) -> None:
        try:
            stream = client.chat.completions.create(**kwargs)
            with stream:
                for chunk in stream:
                    if abort.is_set():
                        return
                    feed.put(("chunk", chunk))
            feed.put(("done", None))
        except openai.APIError as exc:
            feed.put(("error", classify(exc, url=self.base_url)))
        except httpx2.TimeoutException:
            feed.put(("error", ProviderError(TIMED_OUT.format(url=self.base_url), retryable=True)))
        except httpx2.HTTPError as exc:
            message = f"The connection to the OpenAI-compatible endpoint {self.base_url} broke off: {exc}"
            feed.put(("error", ProviderError(message, retryable=True)))
        except Exception as exc:
            if abort.is_set():
                return  # the client was closed under a cancelled call
            logger.exception("Unexpected error in the OpenAI-compatible stream")
            feed.put(("error", classify(exc, url=self.base_url)))


def _context_edited(request: LLMRequest) -> tuple[LLMRequest, ContextCleared | None]:
    """``request`` with its old tool results cleared by the context-editing rule, applied
    here as Anthropic's API applies it there (llm/context_editing.py): Chat Completions
    has no such thing. The request's own messages are not changed."""
    if request.context_editing is None:
        return request, None
    messages, cleared = clear_before_sending(request.system, request.messages, request.context_editing)
    if cleared is None:
        return request, None
    return dataclasses.replace(request, messages=messages), cleared


def endpoint_label(base_url: str) -> str:
    """The endpoint as a page shows it: its host (and port)."""
    return urlsplit(base_url).netloc or base_url
