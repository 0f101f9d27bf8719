"""The Content-Security-Policy in a real browser: no page breaks it. The browser tests'
app runs with DEBUG on, where the policy is report-only; Chromium reports every
violation all the same (a ``securitypolicyviolation`` event), and each one fails."""

from __future__ import annotations

import os
import time

import pytest

from tests.browser.conftest import CHROMIUM, LiveApp

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

PASSWORD = "correct horse battery staple"
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


def violations(page) -> list[str]:
    return page.evaluate("window.__csp || []")


def visit(page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    assert violations(page) == [], url


def test_no_page_breaks_the_policy(page, live_app: LiveApp) -> None:
    page.context.add_init_script(WATCH)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    app = live_app.url

    response = page.goto(app + "/accounts/login")
    assert "script-src 'self'" in response.headers["content-security-policy-report-only"]
    assert violations(page) == []
    visit(page, app + "/admin/login/")
    visit(page, app + "/accounts/register")
    page.fill("input[name=email]", f"csp-{time.time_ns()}@example.com")
    page.fill("input[name=password]", PASSWORD)
    page.fill("input[name=password_confirm]", PASSWORD)
    page.click("form button[type=submit]")
    page.wait_for_url(app + "/")
    assert violations(page) == []

    # A task, and its page with the live websocket (connect-src 'self').
    page.click("[data-dialog-open=new-task-dialog]")
    page.locator("#new-task-dialog input[name=title]").fill("Under the policy")
    page.locator("#new-task-dialog button[type=submit]").click()
    card = page.locator(".card", has_text="Under the policy")
    card.wait_for()
    card.locator("a").first.click()
    page.wait_for_url("**/tasks/**")
    page.wait_for_load_state("networkidle")
    assert violations(page) == []

    for path in ("/projects/", "/chat/", "/memory/", "/memory/agents/", "/accounts/password"):
        visit(page, app + path)

    # Bars on the memories page get their width from data-width (no style="").
    visit(page, app + "/memory/recall")
    page.fill("textarea[name=content], input[name=content]", "The build runs on Python 3.11")
    page.click("form[action$='/recall/add'] button[type=submit]")
    page.wait_for_load_state("networkidle")
    bar = page.locator(".recall-bar-fill.confidence").first
    bar.wait_for()
    assert bar.evaluate("el => el.style.width") == "100%"
    assert violations(page) == []

    # Tokens: make one, revoke it through the confirmation (no inline onsubmit).
    visit(page, app + "/accounts/tokens")
    page.fill("input[name=name]", "browser")
    page.click("form[action$='/accounts/tokens'] button[type=submit]")
    page.locator(".token-secret").wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[aria-label='Revoke token browser']")
    page.wait_for_url(app + "/accounts/tokens")
    assert "revoked" in page.content()
    assert violations(page) == []

    # The API docs: Swagger UI starts from its script file and renders the operations.
    visit(page, app + "/api/docs")
    page.locator(".opblock").first.wait_for()
    assert violations(page) == []

    assert not [text for text in console if "Content Security Policy" in text], console
