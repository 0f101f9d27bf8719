"""A 390 px phone: every page of the main navigation can be reached without typing a URL
(below 900 px the top bar's links are behind the Menu button)."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import CHROMIUM, LiveApp
from tests.browser.pages import register

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]


@pytest.mark.parametrize("link, path", [("Chat", "/chat/"), ("Memory", "/memory/"), ("Projects", "/projects/")])
def test_on_a_phone_the_menu_leads_to_every_main_page(page, live_app: LiveApp, link: str, path: str) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    register(page, live_app)
    assert not page.locator(".topnav").is_visible()
    page.locator(".mainmenu-button").click()
    page.locator(".mainmenu .menu").get_by_role("link", name=link, exact=True).click()
    page.wait_for_url(f"**{path}")
    # The menu is there on the next page too, and names where you are.
    page.locator(".mainmenu-button").click()
    current = page.locator('.mainmenu .menu a[aria-current="page"]')
    assert current.count() == 1 and current.inner_text() == link


def test_a_selects_chevron_stays_in_its_box_when_the_field_has_help_or_an_error(page, live_app: LiveApp) -> None:
    register(page, live_app)
    for path in ("/tasks/new",):
        page.goto(live_app.url + path)
        selects = page.locator("form select")
        assert selects.count() > 0, path
        for index in range(selects.count()):
            select = selects.nth(index)
            # The chevron is drawn by the select's wrapper at half its height: the
            # wrapper must be the select's own box, not the field with its help text.
            wrapper = select.evaluate(
                "s => { const w = s.parentElement; const a = w.getBoundingClientRect(), b = s.getBoundingClientRect();"
                " return {cls: w.className, top: a.top - b.top, bottom: a.bottom - b.bottom,"
                " after: getComputedStyle(w, '::after').content} }"
            )
            assert "select-wrap" in wrapper["cls"], (path, wrapper)
            assert abs(wrapper["top"]) <= 1 and abs(wrapper["bottom"]) <= 1, (path, wrapper)
            assert wrapper["after"] not in ("none", "normal"), (path, wrapper)


def test_on_a_touch_screen_the_line_comment_plus_is_plain(browser, live_app: LiveApp) -> None:
    # No hover on a touch screen: the "+" must not wait for one.
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
    try:
        page = context.new_page()
        page.set_content(
            f'<link rel="stylesheet" href="{live_app.url}/static/css/app.css">'
            '<table class="diff-table"><tr class="diff-row"><td class="ln">'
            '<button class="line-comment-add" data-line-comment-add>+</button></td></tr></table>'
        )
        page.wait_for_load_state("networkidle")
        assert page.locator(".line-comment-add").evaluate("b => getComputedStyle(b).opacity") == "1"
    finally:
        context.close()


def test_no_menu_role_promises_keys_the_page_does_not_handle(page, live_app: LiveApp) -> None:
    # role="menu" tells a screen reader to expect arrow keys; the dropdowns are lists of links.
    register(page, live_app)
    assert page.locator('[role="menu"], [role="menuitem"]').count() == 0
    page.locator(".switcher-button").click()
    assert page.get_by_role("link", name="New project").is_visible()
