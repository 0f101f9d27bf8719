"""Context editing (llm/context_editing.py): the rule that clears old tool results, the
Anthropic provider sending it as the API's context management (and the fake API
applying it, as the tests and benches model the API), and the OpenAI-compatible provider
applying it before sending."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from llm.context_editing import (
    API_BETA,
    ContextCleared,
    ContextEditing,
    clear_before_sending,
    clear_old_tool_results,
    estimate_tokens,
)
from llm.demo.context_management import BETA_MISSING, PLACEHOLDER
from llm.providers.anthropic import AnthropicProvider
from llm.providers.base import LLMRequest
from llm.providers.openai_compatible import OpenAICompatibleProvider
from tests.fake_anthropic import EDITOR, FakeAnthropicServer, TextReply
from tests.fake_openai import FakeOpenAIServer

FILE_TEXT = "x = 1  # a line of a file the agent viewed\n" * 100  # ~1,100 tokens
EDITOR_TOOL = {"type": "text_editor_20250728", "name": EDITOR}


def view(n: int) -> tuple[dict, dict]:
    """A turn that views app/f<n>.py: the tool call and its result."""
    tool_input = {"command": "view", "path": f"app/f{n}.py"}
    call = {"type": "tool_use", "id": f"toolu_{n}", "name": EDITOR, "input": tool_input}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"# f{n}\n{FILE_TEXT}"}
    return call, result


def edit(n: int) -> tuple[dict, dict]:
    tool_input = {"command": "str_replace", "path": f"app/f{n}.py", "old_str": "x = 1", "new_str": "x = 2"}
    call = {"type": "tool_use", "id": f"toolu_e{n}", "name": EDITOR, "input": tool_input}
    # A long snippet, so that clearing it would save tokens.
    result = {"type": "tool_result", "tool_use_id": f"toolu_e{n}", "content": f"Edited app/f{n}.py.\n{FILE_TEXT}"}
    return call, result


def conversation(turns: list[tuple[dict, dict]]) -> list[dict]:
    messages = [{"role": "user", "content": "Read the files."}]
    for call, result in turns:
        messages += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    return messages


def results(messages: list[dict]) -> list[str]:
    return [
        block["content"]
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


def test_below_the_trigger_nothing_is_cleared() -> None:
    messages = conversation([view(n) for n in range(6)])
    editing = ContextEditing(trigger_tokens=100_000, keep_tool_uses=2, clear_at_least=0)
    edited, cleared = clear_before_sending("System.", messages, editing)
    assert edited is messages and cleared is None


def test_the_latest_results_and_every_edit_are_kept_and_stubs_say_how_to_get_the_rest_back() -> None:
    messages = conversation([view(0), view(1), edit(1), view(2), view(3), view(4), view(5)])
    original = json.dumps(messages)
    editing = ContextEditing(trigger_tokens=2_000, keep_tool_uses=2, clear_at_least=0)
    edited, cleared = clear_before_sending("System.", messages, editing)
    shown = results(edited)
    # Cleared oldest first while the prompt is still over the trigger (here: all it may),
    # never the edit's result or the latest two.
    stubs = [f"[cleared to save context: view app/f{n}.py again if needed]" for n in range(4)]
    assert shown == [*stubs[:2], results(messages)[2], *stubs[2:], f"# f4\n{FILE_TEXT}", f"# f5\n{FILE_TEXT}"]
    saved = sum(estimate_tokens(f"# f{n}\n{FILE_TEXT}") - estimate_tokens(stubs[n]) for n in range(4))
    assert cleared == ContextCleared(tool_uses=4, tokens=saved)
    assert json.dumps(messages) == original  # the conversation itself stays whole


def test_nothing_is_cleared_unless_clear_at_least_can_be() -> None:
    messages = conversation([view(n) for n in range(4)])
    enough = ContextEditing(trigger_tokens=1_000, keep_tool_uses=1, clear_at_least=2_000)
    too_much = ContextEditing(trigger_tokens=1_000, keep_tool_uses=1, clear_at_least=10_000)
    _, cleared = clear_before_sending("System.", messages, enough)
    assert cleared is not None and cleared.tool_uses == 2 and cleared.tokens >= 2_000
    assert clear_before_sending("System.", messages, too_much) == (messages, None)


def test_a_batch_once_cleared_is_cleared_the_same_way_on_later_turns() -> None:
    """What keeps the prompt cache: the same prefix is sent until the next batch goes."""
    editing = ContextEditing(trigger_tokens=4_000, keep_tool_uses=1, clear_at_least=2_000)
    first, cleared = clear_old_tool_results(conversation([view(n) for n in range(4)]), editing, prompt_tokens=4_500)
    later, again = clear_old_tool_results(conversation([view(n) for n in range(5)]), editing, prompt_tokens=5_600)
    assert cleared == again and cleared is not None and cleared.tool_uses == 2
    assert first[: 1 + 2 * 3] == later[: 1 + 2 * 3]
    # Far enough past it, a second batch goes.
    _, more = clear_old_tool_results(conversation([view(n) for n in range(8)]), editing, prompt_tokens=7_000)
    assert more is not None and more.tool_uses == 4


def test_excluded_tools_are_never_cleared() -> None:
    messages = conversation([view(n) for n in range(4)])
    editing = ContextEditing(trigger_tokens=1_000, keep_tool_uses=1, clear_at_least=0, exclude_tools=(EDITOR,))
    assert clear_before_sending("System.", messages, editing) == (messages, None)


# --- The Anthropic provider and the fake API ---------------------------------------------


@pytest.fixture
def fake_api():
    with FakeAnthropicServer() as server:
        yield server


def _anthropic_call(server: FakeAnthropicServer, request: LLMRequest):
    provider = AnthropicProvider(api_key="sk-test-key", base_url=server.url, timeout=5.0)
    return provider.complete(request, on_chunk=lambda c: None, should_cancel=lambda: False)


def _coder_request(messages: list[dict], editing: ContextEditing | None) -> LLMRequest:
    return LLMRequest(
        system="You code.",
        messages=messages,
        model="claude-x",
        max_tokens=100,
        server_tools=(EDITOR_TOOL,),
        context_editing=editing,
    )


def test_the_provider_sends_the_beta_and_the_fake_api_clears_as_asked(fake_api) -> None:
    fake_api.script(TextReply("Done."))
    messages = conversation([view(n) for n in range(5)])
    editing = ContextEditing(trigger_tokens=3_000, keep_tool_uses=2, clear_at_least=1_500)
    result = _anthropic_call(fake_api, _coder_request(messages, editing))

    received = fake_api.requests[0]
    assert API_BETA in received.headers["anthropic-beta"].split(",")
    assert received.body["context_management"] == {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 3_000},
                "keep": {"type": "tool_uses", "value": 2},
                "clear_at_least": {"type": "input_tokens", "value": 1_500},
            }
        ]
    }
    # The whole conversation was sent; the model read it with the oldest results cleared.
    assert received.received_messages is not None
    assert results(received.received_messages) == results(messages)
    read = results(received.body["messages"])
    assert read[:2] == [PLACEHOLDER, PLACEHOLDER] and read[-2:] == results(messages)[-2:]
    assert result.context_cleared is not None and result.context_cleared.tool_uses == 2
    tokens = result.context_cleared.tokens
    assert received.applied_edits == [
        {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": tokens}
    ]
    assert result.context_cleared.tokens > 1_500
    assert result.text == "Done."


def test_without_context_editing_nothing_is_sent_or_cleared(fake_api) -> None:
    fake_api.script(TextReply("Done."))
    messages = conversation([view(n) for n in range(5)])
    result = _anthropic_call(fake_api, _coder_request(messages, None))
    received = fake_api.requests[0]
    assert "context_management" not in received.body
    assert API_BETA not in received.headers.get("anthropic-beta", "")
    assert received.applied_edits is None and received.received_messages is None
    assert results(received.body["messages"]) == results(messages)
    assert result.context_cleared is None


def test_a_call_below_the_trigger_clears_nothing_and_says_so(fake_api) -> None:
    fake_api.script(TextReply("Done."))
    editing = ContextEditing(trigger_tokens=100_000, keep_tool_uses=2, clear_at_least=0)
    result = _anthropic_call(fake_api, _coder_request(conversation([view(0), view(1)]), editing))
    assert fake_api.requests[0].applied_edits == []
    assert result.context_cleared is None


def test_the_fake_api_refuses_context_management_without_the_beta_header(fake_api) -> None:
    body = {
        "model": "claude-x",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "Hi"}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    }
    request = urllib.request.Request(
        f"{fake_api.url}/v1/messages", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["error"]["message"] == BETA_MISSING


def test_the_fake_api_takes_the_claude_cli_s_thinking_edit_and_refuses_an_unknown_one(fake_api) -> None:
    def post(edits: list[dict]) -> tuple[int, dict]:
        body = {
            "model": "claude-x",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "Hi"}],
            "context_management": {"edits": edits},
        }
        headers = {"Content-Type": "application/json", "anthropic-beta": f"other-beta,{API_BETA}"}
        request = urllib.request.Request(f"{fake_api.url}/v1/messages", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    fake_api.script(TextReply("Hello."))
    status, answer = post([{"type": "clear_thinking_20251015", "keep": "all"}])
    assert status == 200 and answer["context_management"] == {"applied_edits": []}
    status, answer = post([{"type": "clear_everything_20990101"}])
    assert status == 400 and "unknown type 'clear_everything_20990101'" in answer["error"]["message"]


# --- The OpenAI-compatible provider: the same rule, on the client side ------------------


def test_an_openai_compatible_endpoint_gets_the_old_results_cleared_before_sending() -> None:
    messages = conversation([view(0), edit(0), view(1), view(2), view(3), view(4)])
    editing = ContextEditing(trigger_tokens=3_000, keep_tool_uses=2, clear_at_least=0)
    with FakeOpenAIServer() as server:
        server.script(TextReply("Done."))
        provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="sk-test", local=False, timeout=5.0)
        request = _coder_request(messages, editing)
        result = provider.complete(request, on_chunk=lambda c: None, should_cancel=lambda: False)
        sent = [m["content"] for m in server.requests[0].wire_body["messages"] if m["role"] == "tool"]
    assert sent[0] == "[cleared to save context: view app/f0.py again if needed]"
    assert sent[1].startswith("Edited app/f0.py.")  # an edit's result is kept
    assert sent[-2:] == [f"# f3\n{FILE_TEXT}", f"# f4\n{FILE_TEXT}"]
    assert result.context_cleared is not None
    assert result.context_cleared.tool_uses == sum(text.startswith("[cleared") for text in sent)
    assert results(request.messages)[0] == f"# f0\n{FILE_TEXT}"  # the caller's conversation is whole
