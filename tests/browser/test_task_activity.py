"""The task page's Activity list follows the card live: as the pipeline moves the task
through Spec, Building and Review, the list gains each move without a reload."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.pages import create_task, register

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]


def test_the_activity_list_follows_the_card_while_the_run_moves_it(page, live_app: LiveApp) -> None:
    register(page, live_app)
    create_task(page, "Add a feature function")
    page.click(".card-title:text('Add a feature function')")
    page.wait_for_url("**/tasks/*")
    activity = page.locator("[data-testid=task-activity]")
    assert "Created in Backlog" in activity.inner_text()
    page.evaluate("window.__notReloaded = true")

    page.click("#pipeline-panel .start-form button[type=submit]")
    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)

    page.wait_for_function(
        "() => document.querySelector('[data-testid=task-activity]').innerText.includes('to Review')",
        timeout=RUN_TIMEOUT_MS,
    )
    text = activity.inner_text()
    assert "Moved from Backlog to Spec" in text and "to Building" in text
    assert page.evaluate("window.__notReloaded") is True  # live, not a reload
