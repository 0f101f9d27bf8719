"""Prompt caching: the breakpoints a request carries, the cache usage the fake API
reports for them (as the real one does), and what cached tokens cost."""

from __future__ import annotations

from decimal import Decimal

import pytest

from llm.demo.model import MessagesRequest
from llm.pricing import call_cost
from llm.providers import provider_for
from llm.providers.anthropic import AnthropicProvider, request_kwargs
from llm.providers.base import LLMRequest, Tool
from tests.fake_anthropic import FakeAnthropicServer, TextReply, ToolReply

EPHEMERAL = {"type": "ephemeral"}
LOOK = Tool(name="list_files", description="List files.", input_schema={"type": "object", "properties": {}})
ANSWER = Tool(name="submit_plan", description="Submit the plan.", input_schema={"type": "object", "properties": {}})
SYSTEM = "You plan. " * 200


@pytest.fixture
def fake_llm():
    with FakeAnthropicServer() as server:
        yield server


def _provider(server: FakeAnthropicServer, *, prompt_caching: bool = True) -> AnthropicProvider:
    return AnthropicProvider(api_key="sk-test-key", base_url=server.url, timeout=5.0, prompt_caching=prompt_caching)


def _request(messages: list[dict], **kwargs) -> LLMRequest:
    return LLMRequest(
        system=SYSTEM, messages=messages, model="claude-x", max_tokens=100, tool=ANSWER, explore_tools=(LOOK,), **kwargs
    )


def _complete(server: FakeAnthropicServer, request: LLMRequest, **kwargs):
    return _provider(server, **kwargs).complete(request, on_chunk=lambda c: None, should_cancel=lambda: False)


def _breakpoints(body: dict) -> int:
    blocks = [*body.get("tools", [])]
    if isinstance(body["system"], list):
        blocks += body["system"]
    for message in body["messages"]:
        if isinstance(message["content"], list):
            blocks += message["content"]
    return sum(1 for block in blocks if "cache_control" in block)


def test_the_request_carries_breakpoints_on_tools_system_and_last_message(fake_llm) -> None:
    fake_llm.script(ToolReply(input={}))
    request = _request([{"role": "user", "content": "Plan it"}])
    _complete(fake_llm, request)
    body = fake_llm.requests[0].body
    assert [tool.get("cache_control") for tool in body["tools"]] == [None, EPHEMERAL]
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Plan it", "cache_control": EPHEMERAL}]}
    ]
    assert _breakpoints(body) == 3  # the API allows 4
    # The caller's request is left as it was (its messages go on to the next turn).
    assert request.messages == [{"role": "user", "content": "Plan it"}]


def test_the_last_block_of_a_tool_turn_is_the_breakpoint() -> None:
    messages = [
        {"role": "user", "content": "Plan it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "list_files", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "a.py"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "b.py"},
            ],
        },
    ]
    kwargs = request_kwargs(_request(messages), cache=True)
    # The previous turn's last message keeps a breakpoint too (the API's lookback is short).
    assert kwargs["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": "Plan it", "cache_control": EPHEMERAL}],
    }
    assert kwargs["messages"][1] == messages[1]
    assert kwargs["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "a.py"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "b.py", "cache_control": EPHEMERAL},
    ]
    assert _breakpoints(kwargs) == 4  # the API's limit


@pytest.mark.parametrize("off", ["request", "provider"])
def test_caching_off_sends_no_breakpoints_and_reports_no_cache(fake_llm, off) -> None:
    fake_llm.script(ToolReply(input={}))
    request = _request([{"role": "user", "content": "Plan it"}], cache=off != "request")
    result = _complete(fake_llm, request, prompt_caching=off != "provider")
    body = fake_llm.requests[0].body
    assert body["system"] == SYSTEM
    assert body["messages"] == [{"role": "user", "content": "Plan it"}]
    assert _breakpoints(body) == 0
    assert (result.cache_creation_input_tokens, result.cache_read_input_tokens) == (0, 0)
    assert result.input_tokens > 500  # the whole prompt, uncached


def test_the_setting_turns_caching_off(settings) -> None:
    settings.LLM_PROVIDER = "anthropic"
    assert provider_for().prompt_caching is True  # type: ignore[attr-defined]
    settings.LLM_PROMPT_CACHING = False
    assert provider_for().prompt_caching is False  # type: ignore[attr-defined]


def test_the_second_turn_of_a_conversation_reads_the_prefix_from_cache(fake_llm) -> None:
    fake_llm.script(ToolReply(name="list_files", input={}), ToolReply(input={"done": True}))
    first_messages = [{"role": "user", "content": "Plan it"}]
    first = _complete(fake_llm, _request(first_messages))
    assert first.cache_read_input_tokens == 0
    assert first.cache_creation_input_tokens > 500  # the system prompt and the question
    assert first.input_tokens == 1  # nothing after the last breakpoint
    second_messages = [
        *first_messages,
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": first.tool_calls[0].id, "content": "a.py\n" * 50}],
        },
    ]
    second = _complete(fake_llm, _request(second_messages))
    # What the first call cached is read; only the new turn is written.
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert 0 < second.cache_creation_input_tokens < first.cache_creation_input_tokens
    # The same request again reads everything.
    third = _complete(fake_llm, _request(second_messages))
    assert third.cache_creation_input_tokens == 0
    assert third.cache_read_input_tokens == second.cache_read_input_tokens + second.cache_creation_input_tokens


def test_the_cache_is_per_server_and_a_changed_prefix_misses(fake_llm) -> None:
    fake_llm.script(TextReply(text="a"), TextReply(text="b"))
    same = LLMRequest(system=SYSTEM, messages=[{"role": "user", "content": "Plan it"}], model="m", max_tokens=9)
    other = LLMRequest(system=SYSTEM + "!", messages=[{"role": "user", "content": "Plan it"}], model="m", max_tokens=9)
    _complete(fake_llm, same)
    result = _complete(fake_llm, other)
    assert result.cache_read_input_tokens == 0
    with FakeAnthropicServer() as fresh:
        fresh.script(TextReply(text="c"))
        assert _complete(fresh, same).cache_read_input_tokens == 0


def test_the_fake_reports_cache_usage_on_the_wire(fake_llm) -> None:
    """message_start and the cumulative message_delta carry the counts, as the API's do;
    a request without breakpoints gets the usage it always got."""
    marked = MessagesRequest(
        path="/v1/messages",
        headers={},
        body={"system": [{"type": "text", "text": "x" * 400, "cache_control": EPHEMERAL}], "messages": []},
    )
    assert fake_llm.cache_usage(marked) == (100, 0)
    assert fake_llm.cache_usage(marked) == (0, 100)
    plain = MessagesRequest(path="/v1/messages", headers={}, body={"system": "x" * 400, "messages": []})
    assert fake_llm.cache_usage(plain) == (None, None)


def _marked(model: str, *texts: str) -> MessagesRequest:
    """A request of one user message per text, the last block of each a breakpoint."""
    messages = [
        {"role": "user", "content": [{"type": "text", "text": text, "cache_control": EPHEMERAL}]} for text in texts
    ]
    return MessagesRequest(path="/v1/messages", headers={}, body={"model": model, "system": "", "messages": messages})


def test_the_fake_does_not_cache_a_prefix_below_the_models_minimum(fake_llm) -> None:
    """1,024 tokens for Sonnet 4.5, 4,096 for Opus 4.5 and Haiku 4.5: shorter is billed
    as plain input, with no error, and is not read later either."""
    short, long = "x" * 4 * 1000, "x" * 4 * 2000
    assert fake_llm.cache_usage(_marked("claude-sonnet-4-5-20250929", short)) == (0, 0)
    assert fake_llm.cache_usage(_marked("claude-sonnet-4-5-20250929", short)) == (0, 0)
    assert fake_llm.cache_usage(_marked("claude-sonnet-4-5", long)) == (2000, 0)
    assert fake_llm.cache_usage(_marked("claude-sonnet-4-5", long)) == (0, 2000)
    assert fake_llm.cache_usage(_marked("claude-opus-4-5", "y" * 4 * 2000)) == (0, 0)
    assert fake_llm.cache_usage(_marked("claude-haiku-4-5", "y" * 4 * 5000)) == (5000, 0)


def test_the_fake_cache_lives_five_minutes_from_its_last_use(fake_llm) -> None:
    now = [1000.0]
    fake_llm.clock = lambda: now[0]
    request = _marked("claude-x", "x" * 400)
    assert fake_llm.cache_usage(request) == (100, 0)
    now[0] += 299
    assert fake_llm.cache_usage(request) == (0, 100)  # a hit refreshes the entry
    now[0] += 299
    assert fake_llm.cache_usage(request) == (0, 100)
    now[0] += 301
    assert fake_llm.cache_usage(request) == (100, 0)


def _parallel_turn(calls: int) -> list[dict]:
    """An assistant reply with ``calls`` tool calls and the user's tool results."""
    uses = [{"type": "tool_use", "id": f"t{k}", "name": "list_files", "input": {}} for k in range(calls)]
    results = [{"type": "tool_result", "tool_use_id": f"t{k}", "content": f"file_{k}.py\n" * 20} for k in range(calls)]
    return [{"role": "assistant", "content": uses}, {"role": "user", "content": results}]


def test_the_fake_finds_an_earlier_prefix_only_20_blocks_back(fake_llm) -> None:
    first = MessagesRequest(
        path="/v1/messages",
        headers={},
        body={
            "system": "",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "x" * 400, "cache_control": EPHEMERAL}]}
            ],
        },
    )
    assert fake_llm.cache_usage(first) == (100, 0)
    for calls, read in ((10, 100), (11, 0)):  # the breakpoint 20 or 22 blocks after the cached prefix
        turn = _parallel_turn(calls)
        turn[-1]["content"][-1] = {**turn[-1]["content"][-1], "cache_control": EPHEMERAL}
        messages = [{"role": "user", "content": "x" * 400}, *turn]
        request = MessagesRequest(path="/v1/messages", headers={}, body={"system": "", "messages": messages})
        assert fake_llm.cache_usage(request)[1] == read


def test_a_turn_with_many_tool_calls_still_reads_the_conversation_from_cache(fake_llm) -> None:
    """The previous turn's breakpoint is sent again, so the API finds it however many
    blocks the new turn added."""
    fake_llm.script(ToolReply(name="list_files", input={}), ToolReply(input={"done": True}))
    first_messages = [{"role": "user", "content": "Plan it"}]
    first = _complete(fake_llm, _request(first_messages))
    second = _complete(fake_llm, _request([*first_messages, *_parallel_turn(15)]))
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens > 500
    assert second.cache_creation_input_tokens > 0  # only the new turn is written


def test_cache_writes_and_reads_are_priced() -> None:
    # claude-sonnet-4-5: $3 in, $15 out per million; writes 1.25x, reads 0.1x the input price.
    assert call_cost(
        model="claude-sonnet-4-5",
        input_tokens=1_000,
        output_tokens=2_000,
        cache_creation_input_tokens=10_000,
        cache_read_input_tokens=100_000,
    ) == Decimal("0.003") + Decimal("0.030") + Decimal("0.0375") + Decimal("0.030")
    assert call_cost(
        model="claude-opus-4-1",
        input_tokens=0,
        output_tokens=0,
        cache_creation_input_tokens=1,
        cache_read_input_tokens=1,
    ) == Decimal("0.000020")  # 15 * 1.25 = 18.75 and 1.5 per million: 0.00002025, to the micro-dollar
    assert call_cost(model="claude-haiku-4-5", input_tokens=10, output_tokens=0) == Decimal("0.000010")


def test_billed_tokens_weigh_cache_reads_and_writes_by_their_price() -> None:
    from llm.providers.base import LLMResult

    result = LLMResult(
        text="",
        tool_input=None,
        raw_tool_input="",
        input_tokens=100,
        output_tokens=50,
        model="m",
        cache_creation_input_tokens=400,
        cache_read_input_tokens=10_000,
    )
    assert result.all_input_tokens == 10_500
    # 100 uncached + 400 × 1.25 written + 10,000 ÷ 10 read + 50 out
    assert result.billed_tokens == 100 + 500 + 1_000 + 50
