"""What the live events show is the server's rendering: a chat message (the page's own
partial, escaped) looks the same live as after a reload, and the task page titles a
phase's output with the label the server sends (static/js/chat.js, task_live.js)."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.pages import register, start_run
from tests.browser.test_board_and_runs import PLAN
from tests.fake_anthropic import TextReply, ToolReply

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

HOSTILE = '<b>bold</b> & <img src=x onerror="window.pwned=1">'
MESSAGES = "[data-chat-messages]"


def test_a_chat_message_shown_live_is_the_one_a_reload_shows(page, live_app: LiveApp) -> None:
    live_app.llm.script(TextReply(f"You wrote {HOSTILE}", chunk_size=7, chunk_delay=0.02))
    register(page, live_app)
    page.goto(live_app.url + "/chat/")
    page.fill("[data-chat-input]", HOSTILE)
    page.keyboard.press("Enter")
    page.locator(".chat-user .chat-text", has_text="<b>bold</b>").wait_for()
    reply = page.locator(".chat-assistant[data-message-id] .chat-text", has_text="You wrote")
    reply.wait_for(timeout=RUN_TIMEOUT_MS)
    page.locator(".chat-user [data-pending]").wait_for(state="detached")
    assert reply.inner_text() == f"You wrote {HOSTILE}"
    assert page.locator(f"{MESSAGES} b, {MESSAGES} img").count() == 0
    assert page.evaluate("() => window.pwned") is None
    # The reply (the event's HTML) is the list item a reload renders.
    item = ".chat-assistant[data-message-id]"
    live = page.locator(item).evaluate("node => node.outerHTML")
    page.reload()
    page.locator(item).wait_for()
    assert " ".join(page.locator(item).evaluate("node => node.outerHTML").split()) == " ".join(live.split())


def test_the_live_log_is_titled_with_the_servers_label(page, live_app: LiveApp) -> None:
    live_app.llm.script(ToolReply(input=PLAN, text="Planning the change. " * 6, chunk_size=6, chunk_delay=0.04))
    register(page, live_app)
    start_run(page, "Label the phases")
    label = page.locator("[data-log-pane=planner] .log-run").first
    label.wait_for(state="attached")
    assert label.text_content() == "Planning"
    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)
    # The labels written live are the ones the page renders from the stored events.
    live = page.locator("[data-agent-logs] .log-run").all_text_contents()
    page.reload()
    assert page.locator("[data-agent-logs] .log-run").all_text_contents() == live
