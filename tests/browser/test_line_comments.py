"""Comments on lines of the diff in the browser: the "+" on a line number opens the form
under the line, shift-click makes a range, and Request changes sends them (they move to
the review history)."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.pages import create_task, line_comment_plus, register

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]


def test_comment_on_a_line_and_a_range_then_request_changes(page, live_app: LiveApp) -> None:
    register(page, live_app)
    create_task(page, "Add a feature function")
    page.click(".card-title:text('Add a feature function')")
    page.click("#pipeline-panel .start-form button[type=submit]")
    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)

    file = page.locator("#pipeline-diff .diff-file[data-path='src/feature.py']")
    # Before any hover the "+" can be seen (it was transparent until pointed at).
    plus = file.locator("tr[data-new-line='1'] [data-line-comment-add]")
    page.mouse.move(0, 0)
    # A live update may swap the panel between finding the button and reading its style
    # (a detached element has no computed style): read it again until it is in the page.
    opacity = ""
    for _ in range(50):
        opacity = plus.evaluate("b => b.isConnected ? getComputedStyle(b).opacity : ''")
        if opacity:
            break
        page.wait_for_timeout(100)
    assert float(opacity) >= 0.25
    line_comment_plus(file, 1).click()
    form = page.locator("[data-testid=line-comment-form]")
    # The box is named by its label (what a screen reader says), the lines it is about.
    labels = form.locator("textarea").evaluate("t => Array.from(t.labels).map(l => l.textContent)")
    assert labels == ["Comment on src/feature.py, line 1"]
    assert form.locator("[data-line-comment-where]").inner_text() == "Comment on src/feature.py, line 1"
    form.locator("textarea").fill("Add a docstring")
    form.locator("button[type=submit]").click()
    page.locator("[data-testid=line-comment]", has_text="Add a docstring").wait_for()

    # A range: a click, then a shift-click on another line of the same file.
    line_comment_plus(file, 1).click()
    line_comment_plus(file, 2).click(modifiers=["Shift"])
    assert form.locator("[data-line-comment-where]").inner_text() == "Comment on src/feature.py, lines 1–2"
    assert file.locator("tr.is-selected").count() == 2
    form.locator("textarea").fill("Return a constant")
    form.locator("button[type=submit]").click()
    page.locator("[data-testid=line-comment]", has_text="src/feature.py, lines 1–2").wait_for()
    assert "2 comments" in page.locator("[data-testid=pending-line-comments]").inner_text()
    page.locator("#pipeline-diff").screenshot(path=str(ARTIFACTS / "line-comments.png"))

    page.fill("#pipeline-panel textarea[name=feedback]", "Please polish it")
    page.click("#pipeline-panel button:has-text('Request changes')")
    history = page.locator("[data-testid=line-comment-history]")
    history.wait_for()
    assert "Sent with request for changes 1" in history.inner_text()
    assert history.locator("[data-testid=sent-line-comment]").count() == 2
    assert page.locator("[data-testid=line-comment]").count() == 0
