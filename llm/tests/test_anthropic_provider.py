from __future__ import annotations

import threading
import time

import pytest

from llm.providers import provider_for
from llm.providers.anthropic import KEY_REJECTED, NO_API_KEY, AnthropicProvider
from llm.providers.base import Cancelled, LLMRequest, ProviderError, Tool
from tests.fake_anthropic import (
    FakeAnthropicServer,
    Hang,
    HttpError,
    MidStreamError,
    Paced,
    RawToolInputReply,
    TextReply,
    ToolReply,
)

PLAN_TOOL = Tool(
    name="submit_plan",
    description="Submit the plan.",
    input_schema={"type": "object", "properties": {"subtasks": {"type": "array"}}, "required": ["subtasks"]},
)


@pytest.fixture
def fake_llm():
    with FakeAnthropicServer() as server:
        yield server


def _provider(server: FakeAnthropicServer, timeout: float = 5.0) -> AnthropicProvider:
    return AnthropicProvider(api_key="sk-test-key", base_url=server.url, timeout=timeout)


def _request(tool: Tool | None = PLAN_TOOL) -> LLMRequest:
    return LLMRequest(
        system="You plan.",
        messages=[{"role": "user", "content": "Plan it"}],
        model="claude-x",
        max_tokens=500,
        tool=tool,
    )


def test_streams_tool_input_and_reports_usage(fake_llm) -> None:
    fake_llm.script(ToolReply(text="Thinking. ", input={"subtasks": [{"id": "a"}]}, input_tokens=7, output_tokens=11))
    chunks: list[str] = []
    result = _provider(fake_llm).complete(_request(), on_chunk=chunks.append, should_cancel=lambda: False)
    assert result.tool_input == {"subtasks": [{"id": "a"}]}
    assert result.text == "Thinking. "
    assert (result.input_tokens, result.output_tokens) == (7, 11)
    assert "".join(chunks).startswith("Thinking. ")
    assert len(chunks) > 2
    sent = fake_llm.requests[0]
    assert sent.body["tool_choice"] == {"type": "tool", "name": "submit_plan"}
    assert sent.body["stream"] is True
    assert sent.headers.get("X-Api-Key") == "sk-test-key" or "sk-test-key" in sent.headers.get("Authorization", "")


def test_plain_text_reply(fake_llm) -> None:
    fake_llm.script(TextReply(text="Hello there"))
    result = _provider(fake_llm).complete(_request(tool=None), on_chunk=lambda c: None, should_cancel=lambda: False)
    assert result.text == "Hello there"
    assert result.tool_input is None


@pytest.mark.parametrize(
    ("reply", "retryable", "retry_after"),
    [
        (HttpError(429, "rate_limit_error", headers={"retry-after": "3"}), True, 3.0),
        (HttpError(500, "api_error"), True, None),
        (HttpError(529, "overloaded_error"), True, None),
        (MidStreamError("overloaded_error"), True, None),
        (HttpError(401, "authentication_error"), False, None),
        (HttpError(400, "invalid_request_error", message="max_tokens too large"), False, None),
    ],
)
def test_errors_are_classified(fake_llm, reply, retryable: bool, retry_after: float | None) -> None:
    fake_llm.script(reply)
    with pytest.raises(ProviderError) as excinfo:
        _provider(fake_llm).complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
    assert excinfo.value.retryable is retryable
    assert excinfo.value.retry_after == retry_after


def test_rejected_key_says_what_to_fix(fake_llm) -> None:
    fake_llm.script(HttpError(401, "authentication_error", message="invalid x-api-key"))
    with pytest.raises(ProviderError, match=KEY_REJECTED):
        _provider(fake_llm).complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)


def test_without_a_key_the_call_fails_with_what_to_set_and_reaches_no_server(fake_llm, settings) -> None:
    """provider_for has no placeholder key: the server's key, or a caller's, or an error."""
    settings.ANTHROPIC_API_KEY = ""
    settings.ANTHROPIC_BASE_URL = fake_llm.url
    settings.LLM_PROVIDER = "anthropic"
    with pytest.raises(ProviderError, match=NO_API_KEY) as failed:
        provider_for().complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
    assert failed.value.retryable is False
    assert fake_llm.requests == []
    # A caller's own key is used when the server has none.
    fake_llm.script(ToolReply({"subtasks": []}))
    result = provider_for(api_key="sk-ant-own").complete(
        _request(), on_chunk=lambda c: None, should_cancel=lambda: False
    )
    assert result.tool_input == {"subtasks": []}
    assert len(fake_llm.requests) == 1
    sent = {name.lower(): value for name, value in fake_llm.requests[0].headers.items()}
    # The SDK sends the key as x-api-key or as a bearer token, depending on its version.
    assert "sk-ant-own" in sent.get("x-api-key", "") + sent.get("authorization", "")


def test_timeout_is_retryable(fake_llm) -> None:
    fake_llm.script(Hang(3))
    with pytest.raises(ProviderError) as excinfo:
        _provider(fake_llm, timeout=0.5).complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
    assert excinfo.value.retryable is True


def test_connection_refused_is_retryable() -> None:
    provider = AnthropicProvider(api_key="k", base_url="http://127.0.0.1:9", timeout=1)
    with pytest.raises(ProviderError) as excinfo:
        provider.complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
    assert excinfo.value.retryable is True


def test_malformed_tool_input_gives_no_tool_input(fake_llm) -> None:
    fake_llm.script(RawToolInputReply(partial_json='{"subtasks": [1, 2'))
    try:
        result = _provider(fake_llm).complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
    except ProviderError as exc:
        assert exc.retryable is False
    else:
        assert result.tool_input is None
        assert result.raw_tool_input == '{"subtasks": [1, 2'


def test_cancel_aborts_a_slow_stream_within_a_second(fake_llm) -> None:
    fake_llm.script(ToolReply(text="word " * 200, input={"subtasks": []}, chunk_size=5, chunk_delay=0.05))
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        _provider(fake_llm).complete(_request(), on_chunk=lambda c: None, should_cancel=cancel.is_set)
    assert time.monotonic() - started < 1.5


def test_cancel_aborts_a_silent_server(fake_llm) -> None:
    fake_llm.script(Hang(10))
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises((Cancelled, ProviderError)):
        _provider(fake_llm, timeout=30).complete(_request(), on_chunk=lambda c: None, should_cancel=cancel.is_set)
    assert time.monotonic() - started < 1.5


def test_a_thread_keeps_its_client_between_calls_and_a_cancelled_call_closes_it(fake_llm) -> None:
    """A worker thread runs call after call: building a client each time cost ~25 ms of
    CPU (its SSL context). Each thread keeps its own, so that a cancel, which closes the
    client to abort the request, cuts off no other thread's stream."""
    from llm.providers import anthropic as module

    provider = _provider(fake_llm)
    ok = ToolReply(input={"subtasks": []})
    fake_llm.script(ok, ok)
    provider.complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
    first = module._thread_clients.kept[1]
    provider.complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
    assert module._thread_clients.kept[1] is first and not first.is_closed()

    other: list[object] = []

    def on_another_thread() -> None:
        _provider(fake_llm).complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
        other.append(module._thread_clients.kept[1])

    fake_llm.script(ok)
    thread = threading.Thread(target=on_another_thread)
    thread.start()
    thread.join(10)
    assert other and other[0] is not first

    fake_llm.script(ToolReply(text="word " * 200, input={"subtasks": []}, chunk_size=5, chunk_delay=0.05), ok)
    with pytest.raises(Cancelled):
        provider.complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: len(fake_llm.requests) > 3)
    assert first.is_closed() and not other[0].is_closed(), "the cancel closed this thread's client only"
    provider.complete(_request(), on_chunk=lambda c: None, should_cancel=lambda: False)
    assert not module._thread_clients.kept[1].is_closed(), "the next call builds a new one"


def test_a_paced_reply_streams_one_stamped_token_at_a_time_then_its_tool_call(fake_llm) -> None:
    """The fake's pacing (bench/bench_concurrency.py): each text delta is one token,
    stamped with the time it was written, then the reply's tool call."""
    import re

    fake_llm.script(Paced(ToolReply(input={"subtasks": []}), tokens=20, tokens_per_second=1000, stamped=True))
    chunks: list[str] = []
    result = _provider(fake_llm).complete(_request(), on_chunk=chunks.append, should_cancel=lambda: False)
    stamps = [float(stamp) for chunk in chunks for stamp in re.findall(r"\[t=(\d+\.\d+)\]", chunk)]
    assert len(stamps) == 20 and stamps == sorted(stamps)
    assert result.tool_input == {"subtasks": []}
