"""Requests with server-defined tools (Anthropic's text editor) and the conversation
mode: no answer tool, the model calls tools or answers in plain text."""

from __future__ import annotations

import pytest

from llm.providers.anthropic import AnthropicProvider, request_kwargs
from llm.providers.base import LLMRequest, Tool
from tests.fake_anthropic import FakeAnthropicServer, TextReply

EDITOR = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 20000}
EPHEMERAL = {"type": "ephemeral"}
SEARCH = Tool(name="search_code", description="Search.", input_schema={"type": "object", "properties": {}})
ANSWER = Tool(name="submit_plan", description="Submit.", input_schema={"type": "object", "properties": {}})


@pytest.fixture
def fake_llm():
    with FakeAnthropicServer() as server:
        yield server


def _request(**kwargs) -> LLMRequest:
    return LLMRequest(
        system="You code.", messages=[{"role": "user", "content": "Fix it"}], model="m", max_tokens=100, **kwargs
    )


def test_without_tools_a_request_sends_none() -> None:
    assert _request().api_tools() == ([], None)


def test_a_conversation_sends_the_server_tools_as_given_first_and_lets_the_model_choose() -> None:
    tools, choice = _request(server_tools=(EDITOR,), explore_tools=(SEARCH,)).api_tools()
    assert tools == [EDITOR, SEARCH.as_api()]
    assert choice == {"type": "auto"}
    assert _request(server_tools=(EDITOR,)).api_tools() == ([EDITOR], {"type": "auto"})
    assert _request(explore_tools=(SEARCH,)).api_tools() == ([SEARCH.as_api()], {"type": "auto"})


def test_with_an_answer_tool_the_server_tools_are_offered_before_it() -> None:
    tools, choice = _request(tool=ANSWER, server_tools=(EDITOR,)).api_tools()
    assert tools == [EDITOR, ANSWER.as_api()] and choice == {"type": "any"}
    tools, choice = _request(tool=ANSWER, server_tools=(EDITOR,), force_answer=True).api_tools()
    assert choice == {"type": "tool", "name": "submit_plan"}


def test_the_cache_breakpoint_stays_on_the_last_tool_and_the_editor_dict_is_not_changed() -> None:
    kwargs = request_kwargs(_request(server_tools=(EDITOR,)), cache=True)
    assert kwargs["tools"] == [{**EDITOR, "cache_control": EPHEMERAL}]
    assert kwargs["tool_choice"] == {"type": "auto"}
    assert "cache_control" not in EDITOR
    kwargs = request_kwargs(_request(server_tools=(EDITOR,), explore_tools=(SEARCH,)), cache=False)
    assert kwargs["tools"] == [EDITOR, SEARCH.as_api()]


def test_the_fake_api_receives_the_raw_editor_tool_and_a_plain_text_answer_ends_the_turn(fake_llm) -> None:
    fake_llm.script(TextReply(text="Nothing to change."))
    provider = AnthropicProvider(api_key="sk-test", base_url=fake_llm.url, timeout=5)
    result = provider.complete(_request(server_tools=(EDITOR,)), on_chunk=lambda c: None, should_cancel=lambda: False)
    body = fake_llm.requests[0].body
    assert body["tools"] == [{**EDITOR, "cache_control": EPHEMERAL}]
    assert body["tool_choice"] == {"type": "auto"}
    assert result.text == "Nothing to change."
    assert result.stop_reason == "end_turn" and result.tool_calls == []
