"""AutoCoder.liveSocket (static/js/app.js), the one websocket client of the board, the
task page and the chat: a chat reply streams in over it, a socket the server refuses
stops with the refusal's code, close() stops it for good."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.test_board_and_runs import register
from tests.fake_anthropic import TextReply

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

# Opens a socket on ``path`` and reports, after ``wait_ms``, every status and message.
WATCH = """async ([path, waitMs]) => {
  const seen = [];
  const socket = window.AutoCoder.liveSocket(path, {
    onStatus: (state, event) => seen.push(["status", state, event ? event.code : null]),
    onOpen: (again) => seen.push(["open", again]),
    onMessage: (message) => seen.push(["message", message.type]),
  });
  await new Promise((resolve) => setTimeout(resolve, waitMs));
  socket.close();
  const count = seen.length;
  await new Promise((resolve) => setTimeout(resolve, 1500));
  return { seen, quietAfterClose: seen.length === count };
}"""


def test_a_chat_reply_streams_in_over_the_live_socket(page, live_app: LiveApp) -> None:
    live_app.llm.script(TextReply("Hello from the assistant, streamed in pieces.", chunk_size=5, chunk_delay=0.03))
    register(page, live_app)
    page.goto(live_app.url + "/chat/")
    page.fill("[data-chat-input]", "Say hello")
    page.keyboard.press("Enter")
    page.locator(".chat-user .chat-text", has_text="Say hello").wait_for()
    page.locator(".chat-assistant .chat-text", has_text="streamed in pieces.").wait_for(timeout=RUN_TIMEOUT_MS)
    assert page.locator("[data-chat-live]").is_hidden()


def test_the_live_socket_opens_retries_and_stops(page, live_app: LiveApp) -> None:
    register(page, live_app)
    board = page.locator("[data-board-live]")
    project_socket = board.get_attribute("data-ws-path")
    page.locator("[data-live-indicator][data-state=live]").wait_for()

    opened = page.evaluate(WATCH, [project_socket, 500])
    assert opened["seen"] == [["status", "live", None], ["open", False]]
    assert opened["quietAfterClose"]

    # A socket the server refuses (no such task) is closed with 4404 right after the
    # handshake, so the page learns why, ends offline and does not try again.
    refused = page.evaluate(WATCH, ["/ws/tasks/999999999", 1600])
    assert refused["seen"][-1] == ["status", "offline", 4404], refused
    assert ["status", "reconnecting", None] not in refused["seen"], refused
    assert [entry for entry in refused["seen"] if entry[0] != "open"] in (
        [["status", "offline", 4404]],
        [["status", "live", None], ["status", "offline", 4404]],
    ), refused
    assert refused["quietAfterClose"]

    # A handshake that fails (a path no route serves: what a browser also sees when the
    # network drops) is tried again 1 s later, and again, until close().
    dropped = page.evaluate(WATCH, ["/ws/nowhere", 1600])
    assert len(dropped["seen"]) >= 2, dropped
    assert all(entry == ["status", "reconnecting", None] for entry in dropped["seen"]), dropped
    assert dropped["quietAfterClose"]
