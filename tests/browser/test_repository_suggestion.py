"""The Repository page suggests a test command from the checkout's files; Use it fills
the field, to save as it is or edit."""

from __future__ import annotations

import json
import time

import pytest

from tests.browser.conftest import ARTIFACTS, LiveApp
from tests.browser.pages import git, register

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]


def test_use_it_fills_the_test_command_field(page, live_app: LiveApp) -> None:
    folder = live_app.repos_root / f"web-{time.time_ns()}"
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps({"name": "web", "scripts": {"test": "vitest run"}}))
    (folder / "yarn.lock").write_text("# yarn lockfile v1\n")
    git(folder, "init", "-q", "--initial-branch=main")
    git(folder, "add", "package.json", "yarn.lock")
    git(folder, "commit", "-qm", "Start")

    register(page, live_app)
    page.click("nav >> text=Projects")
    page.click("text=Repository")
    page.fill("input[name=path]", folder.name)
    page.click("button:has-text('Link repository')")

    settings = page.locator("form[action$='/repository/settings']")
    suggestion = settings.locator("[data-testid=repo-suggestion]")
    assert suggestion.locator("[data-testid=suggested-test-command]").inner_text() == "yarn test"
    field = settings.locator("input[name=test_command]")
    assert field.input_value() == ""

    suggestion.locator("button:has-text('Use it')").click()
    assert field.input_value() == "yarn test"
    page.screenshot(path=str(ARTIFACTS / "repository-suggestion.png"), full_page=True)
    field.fill("yarn test --silent")  # edited before it is saved
    settings.locator("button[type=submit]").click()
    assert "yarn test --silent" in page.locator("#repository-status").inner_text()

    # The setup script: suggested under Environment, taken with one click, then in force.
    environment = page.locator("#environment")
    assert "No setup script is in force" in environment.locator("[data-testid=setup-in-force]").inner_text()
    setup = environment.locator("[data-testid=setup-suggestion]")
    assert setup.locator("[data-testid=suggested-setup]").inner_text() == "yarn install --frozen-lockfile"
    setup.locator("button:has-text('Use it')").click()
    assert environment.locator("textarea[name=setup_script]").input_value() == "yarn install --frozen-lockfile"
    environment.locator("button:has-text('Save environment')").click()
    in_force = page.locator("#environment [data-testid=setup-in-force]").inner_text()
    assert "the script written on this page" in in_force and "environment" in in_force
