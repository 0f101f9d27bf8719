"""The OpenAI-compatible provider against the fake Chat Completions server (a real local
HTTP server speaking the API's SSE stream): what it sends, what it reads back, its errors,
and what its calls cost."""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal

import pytest

from llm.pricing import call_cost, price_known
from llm.providers import provider_for
from llm.providers.base import Cancelled, LLMRequest, ProviderError, Tool
from llm.providers.openai_compatible import LOCAL_PLACEHOLDER_KEY, OpenAICompatibleProvider
from llm.providers.openai_messages import EDITOR_TOOL_NAME, chat_messages
from repos.coder_tools import coder_tools
from tests.fake_openai import FakeOpenAIServer, Held, HttpError, MidStreamError, RawToolInputReply, TextReply, ToolReply

PLAN_TOOL = Tool(
    name="submit_plan",
    description="Submit the plan.",
    input_schema={"type": "object", "properties": {"subtasks": {"type": "array"}}, "required": ["subtasks"]},
)
LIST_FILES = Tool(
    name="list_files",
    description="List files.",
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
)


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        yield fake


def _provider(server: FakeOpenAIServer, **kwargs) -> OpenAICompatibleProvider:
    options = {"api_key": "sk-test", "local": False, "timeout": 5.0, **kwargs}
    return OpenAICompatibleProvider(base_url=server.base_url, **options)


def _request(**kwargs) -> LLMRequest:
    options = {
        "system": "You plan.",
        "messages": [{"role": "user", "content": "Plan it"}],
        "model": "gpt-4.1",
        "max_tokens": 500,
        **kwargs,
    }
    return LLMRequest(**options)


def _header(request, name: str) -> str:
    return {key.lower(): value for key, value in request.headers.items()}[name]


def _complete(provider: OpenAICompatibleProvider, request: LLMRequest, chunks: list[str] | None = None):
    return provider.complete(
        request, on_chunk=(chunks if chunks is not None else []).append, should_cancel=lambda: False
    )


def test_streams_text_and_reports_usage_and_the_stop_reason(server) -> None:
    server.script(TextReply("The answer is forty-two, said slowly.", chunk_size=5))
    chunks: list[str] = []
    result = _complete(_provider(server), _request(), chunks)

    assert result.text == "The answer is forty-two, said slowly."
    assert len(chunks) > 3 and "".join(chunks) == result.text
    assert result.stop_reason == "end_turn" and result.tool_calls == []
    assert result.content == [{"type": "text", "text": result.text}]
    assert result.input_tokens > 0 and result.output_tokens > 0 and result.model == "gpt-4.1"
    assert (result.provider, result.local_endpoint) == ("openai", False)
    [sent] = server.chat_requests
    body = sent.wire_body
    assert sent.path == "/v1/chat/completions"
    assert _header(sent, "authorization") == "Bearer sk-test"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "system", "content": "You plan."}, {"role": "user", "content": "Plan it"}]
    assert body["max_tokens"] == 500 and "tools" not in body


def test_a_forced_answer_tool_is_a_named_function_and_its_input_comes_back(server) -> None:
    server.script(ToolReply(text="Splitting it. ", input={"subtasks": [{"id": "a", "title": "x" * 60}]}, chunk_size=7))
    chunks: list[str] = []
    result = _complete(_provider(server), _request(tool=PLAN_TOOL), chunks)

    assert result.tool_input == {"subtasks": [{"id": "a", "title": "x" * 60}]}
    assert result.stop_reason == "tool_use"
    [call] = result.tool_calls
    assert call.name == "submit_plan" and call.id.startswith("call_")
    # The answer's arguments stream into the log after the text, in several pieces.
    assert "".join(chunks) == "Splitting it. " + result.raw_tool_input and len(chunks) > 5
    body = server.chat_requests[0].wire_body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "submit_plan"}}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "submit_plan",
                "description": "Submit the plan.",
                "parameters": PLAN_TOOL.input_schema,
            },
        }
    ]


def test_explore_tools_make_the_choice_required_and_a_conversation_goes_back_as_tool_messages(server) -> None:
    server.script(ToolReply(name="list_files", input={"path": "."}), ToolReply(input={"subtasks": []}))
    provider = _provider(server)
    first = _complete(provider, _request(tool=PLAN_TOOL, explore_tools=(LIST_FILES,)))
    assert first.tool_input is None  # it explored; no answer yet
    [call] = first.tool_calls
    assert (call.name, call.input) == ("list_files", {"path": "."})
    assert server.chat_requests[0].wire_body["tool_choice"] == "required"

    # The loop sends the reply back as content blocks with a tool_result, as for Anthropic.
    messages = [
        {"role": "user", "content": "Plan it"},
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "a.py (3 bytes)"}]},
    ]
    second = _complete(provider, _request(tool=PLAN_TOOL, explore_tools=(LIST_FILES,), messages=messages))
    assert second.tool_input == {"subtasks": []}
    sent = server.chat_requests[1].wire_body["messages"]
    assert sent[2]["role"] == "assistant" and sent[2]["tool_calls"][0]["id"] == call.id
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {"path": "."}
    assert sent[3] == {"role": "tool", "tool_call_id": call.id, "content": "a.py (3 bytes)"}


def test_the_editor_is_offered_as_a_function_with_its_schema_and_its_calls_come_back_by_name(server) -> None:
    server_tools, client_tools = coder_tools()
    edit = {"command": "str_replace", "path": "app/calc.py", "old_str": "a - b", "new_str": "a + b"}
    server.script(ToolReply(name=EDITOR_TOOL_NAME, input=edit, chunk_size=4), TextReply("Done."))
    provider = _provider(server)
    request = _request(server_tools=server_tools, explore_tools=tuple(client_tools))
    result = _complete(provider, request)

    [call] = result.tool_calls
    assert (call.name, call.input) == (EDITOR_TOOL_NAME, edit)
    body = server.chat_requests[0].wire_body
    assert body["tool_choice"] == "auto"
    functions = {tool["function"]["name"]: tool["function"] for tool in body["tools"]}
    assert all(tool["type"] == "function" for tool in body["tools"])
    editor = functions[EDITOR_TOOL_NAME]["parameters"]
    assert editor["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert"]
    assert set(editor["required"]) == {"command", "path"}
    assert {tool.name for tool in client_tools} <= set(functions)

    # An error from the editor goes back marked as one.
    messages = [
        {"role": "user", "content": "Fix it"},
        {"role": "assistant", "content": result.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "no match", "is_error": True}],
        },
    ]
    done = _complete(provider, _request(server_tools=server_tools, messages=messages))
    assert done.text == "Done." and done.stop_reason == "end_turn"
    assert server.chat_requests[1].wire_body["messages"][-1]["content"] == "Error: no match"


def test_a_malformed_tool_call_comes_back_with_input_none(server) -> None:
    server.script(RawToolInputReply('{"subtasks": [1, 2'))
    result = _complete(_provider(server), _request(tool=PLAN_TOOL))
    assert result.tool_input is None
    [call] = result.tool_calls
    assert call.name == "submit_plan" and call.input is None
    assert result.raw_tool_input == '{"subtasks": [1, 2'
    assert result.content[-1] == {"type": "tool_use", "id": call.id, "name": "submit_plan", "input": {}}


def test_a_rate_limit_is_retryable_with_the_wait_the_server_asked_for_and_the_next_call_works(server) -> None:
    server.script(HttpError(429, "rate_limit_error", "Slow down.", headers={"retry-after": "7"}), TextReply("Now."))
    provider = _provider(server)
    with pytest.raises(ProviderError) as raised:
        _complete(provider, _request())
    assert raised.value.retryable is True and raised.value.retry_after == 7.0
    assert "rate limit" in raised.value.message
    assert _complete(provider, _request()).text == "Now."
    assert len(server.chat_requests) == 2  # the SDK's own retries are off


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_is_retryable(server, status: int) -> None:
    server.script(HttpError(status, "server_error", "Boom."))
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), _request())
    assert raised.value.retryable is True and f"({status})" in raised.value.message


def test_an_error_in_the_middle_of_the_stream_is_retryable(server) -> None:
    server.script(MidStreamError(message="The engine fell over."))
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), _request())
    assert raised.value.retryable is True and "The engine fell over." in raised.value.message


def test_a_refused_key_is_permanent_and_names_the_setting(server) -> None:
    server.script(HttpError(401, "authentication_error", "Incorrect API key provided."))
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), _request())
    assert raised.value.retryable is False
    assert "OPENAI_API_KEY" in raised.value.message and server.base_url in raised.value.message


def test_an_unknown_model_is_permanent_and_names_the_settings(server) -> None:
    server.script(HttpError(404, "not_found_error", "The model `gpt-9` does not exist."))
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), _request())
    assert raised.value.retryable is False
    assert "OPENAI_MODEL" in raised.value.message and "gpt-9" in raised.value.message


def test_a_bad_request_is_permanent_with_the_servers_words(server) -> None:
    server.script(HttpError(400, "invalid_request_error", "max_tokens is too large."))
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), _request())
    assert raised.value.retryable is False and "max_tokens is too large." in raised.value.message


def test_an_endpoint_that_is_down_is_retryable() -> None:
    provider = OpenAICompatibleProvider(base_url="http://127.0.0.1:9/v1", api_key="sk-test", local=False)
    with pytest.raises(ProviderError) as raised:
        _complete(provider, _request())
    assert raised.value.retryable is True and "Could not reach" in raised.value.message


def test_no_key_is_refused_before_calling_a_remote_endpoint_but_a_local_one_gets_a_placeholder(server) -> None:
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server, api_key=""), _request())
    assert raised.value.retryable is False and "OPENAI_API_KEY" in raised.value.message
    assert server.chat_requests == []

    server.script(TextReply("Local."))
    local = OpenAICompatibleProvider(base_url=server.base_url, api_key="")  # 127.0.0.1: local by its address
    assert local.local is True
    assert _complete(local, _request()).text == "Local."
    assert _header(server.chat_requests[0], "authorization") == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


def test_a_checked_endpoint_on_an_internal_address_is_refused_before_any_request(server, settings) -> None:
    settings.CLONE_ALLOWED_NETWORKS = []
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server, check_host=True), _request())
    assert raised.value.retryable is False and "internal address" in raised.value.message
    assert server.chat_requests == []

    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    server.script(TextReply("Allowed."))
    assert _complete(_provider(server, check_host=True), _request()).text == "Allowed."
    # Pinned to the checked address; the Host header keeps the URL's host and port.
    assert _header(server.chat_requests[0], "host") == server.base_url.split("//")[1].split("/")[0]


def test_cancel_stops_a_call_the_server_has_not_answered(server) -> None:
    held = Held(TextReply("Too late."), timeout=10)
    server.script(held)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        _provider(server).complete(_request(), on_chunk=lambda _: None, should_cancel=cancel.is_set)
    assert time.monotonic() - started < 3
    held.release.set()


def test_cached_tokens_are_reported_apart_from_the_uncached_input(server) -> None:
    server.cached_tokens = 1000
    server.script(TextReply("Cached.", chunk_size=50))
    result = _complete(_provider(server), _request())
    assert result.cache_read_input_tokens == 1000
    assert result.input_tokens >= 1  # the prompt's uncached rest
    assert result.all_input_tokens == result.input_tokens + 1000


def test_images_and_text_of_a_user_message_become_content_parts() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    request = _request(messages=[{"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}])
    assert chat_messages(request)[1] == {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "What is it?"},
        ],
    }


def test_provider_for_builds_the_servers_endpoint_with_its_key_and_a_projects_own_without_it(settings) -> None:
    settings.OPENAI_BASE_URL = "https://api.example.com/v1"
    settings.OPENAI_API_KEY = "sk-server"
    server_default = provider_for(name="openai")
    assert isinstance(server_default, OpenAICompatibleProvider)
    assert (server_default.base_url, server_default._api_key, server_default._check_host) == (
        "https://api.example.com/v1",
        "sk-server",
        False,
    )
    own = provider_for(name="openai", base_url="https://llm.example.org/v1")
    assert isinstance(own, OpenAICompatibleProvider)
    # The server's key never goes to a project's endpoint; that endpoint is checked.
    assert (own.base_url, own._api_key, own._check_host) == ("https://llm.example.org/v1", "", True)


# --- Cost ------------------------------------------------------------------------------


def test_a_known_model_is_priced_by_its_list_price_with_cached_input_apart() -> None:
    cost = call_cost(
        model="gpt-4.1-2025-04-14",
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_input_tokens=1_000_000,
        provider="openai",
    )
    assert cost == Decimal("2") + Decimal("8") + Decimal("0.5")
    mini = call_cost(model="openai/gpt-4o-mini", input_tokens=1_000_000, output_tokens=0, provider="openai")
    assert mini == Decimal("0.15")
    assert price_known(model="gpt-4o-mini", provider="openai")
    # A Claude model behind a router costs what it costs on Anthropic.
    claude = call_cost(
        model="anthropic/claude-sonnet-4-5", input_tokens=1_000_000, output_tokens=1_000_000, provider="openai"
    )
    assert claude == Decimal("18") and price_known(model="anthropic/claude-sonnet-4-5", provider="openai")


def test_a_local_endpoint_costs_nothing() -> None:
    cost = call_cost(model="llama3.1:8b", input_tokens=50_000, output_tokens=9_000, provider="openai", local=True)
    assert cost == Decimal("0")
    assert price_known(model="llama3.1:8b", provider="openai", local=True)


def test_an_unknown_model_on_a_remote_endpoint_is_never_free_and_is_marked_as_estimated() -> None:
    cost = call_cost(model="mystery-70b", input_tokens=1_000_000, output_tokens=0, provider="openai")
    assert cost > 0  # as with an unknown Anthropic model: a fallback price, never 0 by mistake
    assert not price_known(model="mystery-70b", provider="openai")
    assert not price_known(model="claude-unknown-9")
    assert price_known(model="claude-sonnet-4-6")


def test_a_local_endpoints_calls_are_reported_as_local(server) -> None:
    server.script(TextReply("Free."))
    result = _complete(OpenAICompatibleProvider(base_url=server.base_url, api_key="k"), _request())
    assert result.local_endpoint is True
    cost = call_cost(
        model=result.model,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        provider=result.provider,
        local=result.local_endpoint,
    )
    assert cost == 0


def test_a_thread_keeps_its_client_for_a_trusted_endpoint_and_a_checked_one_gets_its_own(server, settings) -> None:
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    trusted = _provider(server)
    first, own = trusted._client()
    assert own is False and trusted._client()[0] is first  # kept between calls
    assert _provider(server, api_key="sk-other")._client()[0] is not first  # another key: another client
    checked = _provider(server, check_host=True)
    one, own = checked._client()
    assert own is True and checked._client()[0] is not one


def test_the_demo_answers_chat_completions_unstreamed_too(server) -> None:
    import openai

    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    reply = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "remember that tabs win"}]
    )
    assert reply.choices[0].message.content == "I'll remember that. [REMEMBER: tabs win]"
    assert reply.choices[0].finish_reason == "stop" and reply.usage is not None and reply.usage.prompt_tokens > 0
    assert server.chat_requests[0].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "remember that tabs win"}]}
    ]
