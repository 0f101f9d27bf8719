"""What a person does on the pages, step by step, shared by the browser tests."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.browser.conftest import LiveApp

_users = iter(range(1, 1000))


def register(page, app: LiveApp) -> None:
    n = next(_users)
    page.goto(app.url + "/accounts/register")
    page.fill("input[name=display_name]", f"Browser {n}")
    page.fill("input[name=email]", f"browser{n}-{time.time_ns()}@example.com")
    page.fill("input[name=password]", "correct horse battery staple")
    page.fill("input[name=password_confirm]", "correct horse battery staple")
    page.click("form button[type=submit]")
    page.wait_for_url(app.url + "/")


def create_task(page, title: str) -> object:
    page.click("[data-dialog-open=new-task-dialog]")
    dialog = page.locator("#new-task-dialog")
    dialog.locator("input[name=title]").fill(title)
    dialog.locator("button[type=submit]").click()
    card = page.locator(".column[data-status=backlog] .card", has_text=title)
    card.wait_for()
    return card


def drag(page, card, status: str) -> None:
    target = page.locator(f".column[data-status={status}]")
    with page.expect_response(lambda r: "/status" in r.url and r.request.method == "PATCH"):
        card.drag_to(target)


def start_run(page, title: str) -> None:
    """A new task, moved to Spec, and its run started from the task page."""
    card = create_task(page, title)
    drag(page, card, "spec")
    page.locator(".column[data-status=spec] .card", has_text=title).wait_for()
    page.click(f".card-title:text('{title}')")
    page.click("#pipeline-panel .start-form button[type=submit]")


def log_text(page, agent: str) -> str:
    # text_content: a folded pane (a closed <details>) has no innerText.
    return page.locator(f"[data-log-pane={agent}] [data-log-body]").text_content() or ""


def git(folder: Path, *command: str) -> str:
    """git in ``folder`` as a developer on the server would run it; its output."""
    done = subprocess.run(
        ["git", "-c", "user.name=Dev", "-c", "user.email=dev@example.com", *command],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def line_comment_plus(file, line: int):  # type: ignore[no-untyped-def]
    """The "+" beside a new-file line number of a diff file (shown on hover)."""
    row = file.locator(f"tr[data-new-line='{line}']")
    row.hover()
    return row.locator("[data-line-comment-add]")
