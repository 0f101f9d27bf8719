"""The Repository page's Variables and secrets: a secret saved is never shown again, a
plain variable shows its value, a bad name is refused beside its field, Remove removes."""

from __future__ import annotations

import pytest

from tests.browser.conftest import ARTIFACTS, LiveApp
from tests.browser.pages import register

SECRET = "tok-browser-62c1f0a9"


pytestmark = [pytest.mark.slow, pytest.mark.own_topology]


def test_variables_and_secrets_on_the_repository_page(page, live_app: LiveApp) -> None:
    register(page, live_app)
    page.click("nav >> text=Projects")
    page.click("text=Repository")
    section = page.locator("[data-testid=variables]")

    section.locator("input[name=name]").fill("API_TOKEN")
    section.locator("input[name=value]").fill(SECRET)
    assert section.locator("input[name=secret]").is_checked()  # secret unless said otherwise
    section.locator("button:has-text('Save variable')").click()

    section = page.locator("[data-testid=variables]")
    assert "Secret, saved" in section.locator("[data-testid=variable-API_TOKEN]").inner_text()
    assert SECRET not in page.content()
    assert section.locator("input[name=value]").input_value() == ""

    section.locator("input[name=name]").fill("REGION")
    section.locator("input[name=value]").fill("eu-west-1")
    section.locator("input[name=secret]").uncheck()
    section.locator("button:has-text('Save variable')").click()
    section = page.locator("[data-testid=variables]")
    assert "eu-west-1" in section.locator("[data-testid=variable-REGION]").inner_text()

    section.locator("input[name=name]").fill("LD_PRELOAD")
    section.locator("input[name=value]").fill("/tmp/x.so")
    section.locator("button:has-text('Save variable')").click()
    section = page.locator("[data-testid=variables]")
    assert "changes how the shell or the program loader starts" in section.inner_text()
    page.screenshot(path=str(ARTIFACTS / "repository-variables.png"), full_page=True)

    section.locator("[data-testid=variable-API_TOKEN] button:has-text('Remove')").click()
    section = page.locator("[data-testid=variables]")
    assert section.locator("[data-testid=variable-API_TOKEN]").count() == 0
    assert section.locator("[data-testid=variable-REGION]").count() == 1
