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

pytestmark = pytest.mark.slow


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
