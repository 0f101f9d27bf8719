"""The task page's run panel keeps up with the run however its refreshes interleave
with the run's events (static/js/task_live.js)."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.pages import create_task, register

if not os.path.exists(CHROMIUM):
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

PANEL = "**/tasks/*/pipeline"


def test_events_that_arrive_while_the_panel_refreshes_are_shown_once_it_has(page, live_app: LiveApp) -> None:
    register(page, live_app)
    create_task(page, "Refresh behind events")
    page.click(".card-title:text('Refresh behind events')")
    held: list = []
    holding = True

    def hold(route) -> None:
        # Rendered now, delivered when let through: an answer that events overtake.
        if holding:
            held.append((route, route.fetch()))
        else:
            route.continue_()

    page.route(PANEL, hold)
    page.click("#pipeline-panel .start-form button[type=submit]")

    # The whole run happens while the first refresh's answer is on its way: the page took
    # the last phase change (the Reviewer's pane is done) but could not show it yet.
    page.locator("[data-log-pane=reviewer] [data-log-state][data-state=done]").wait_for(timeout=RUN_TIMEOUT_MS)
    assert held, "no panel refresh was asked for"
    assert page.locator(".run-alert-ready").count() == 0
    holding = False
    for route, response in held:
        route.fulfill(response=response)

    page.locator(".run-alert-ready").wait_for()
    assert page.locator("#pipeline-panel").get_attribute("data-run-status") == "awaiting_approval"
