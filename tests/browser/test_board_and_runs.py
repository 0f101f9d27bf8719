"""What a person does in the browser: register, put a task on the board, drag it, run
the agents and watch them stream, review the diff, approve — and the failure paths: a
refused drag snaps back with the reason, a paused run shows its error and Retry works."""

from __future__ import annotations

import os
import re
import time

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.pages import create_task, drag, log_text, register
from tests.fake_anthropic import HttpError, ToolReply

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

PLAN = {
    "subtasks": [
        {"id": "s1", "title": "Write the function", "description": "feature() returns done", "order": 1},
        {"id": "s2", "title": "Test it", "description": "A test pins it down", "order": 2},
    ]
}

# An init script: on a task page, each change to the Planner's log records [its length,
# the run panel's status] in window.__plannerGrowth.
GROWTH_WATCH = """
addEventListener("DOMContentLoaded", () => {
  const body = document.querySelector("[data-log-pane=planner] [data-log-body]");
  if (!body) return;
  window.__plannerGrowth = [];
  new MutationObserver(() => {
    const status = document.getElementById("pipeline-panel")?.getAttribute("data-run-status") || "";
    window.__plannerGrowth.push([body.textContent.length, status]);
  }).observe(body, { childList: true, subtree: true, characterData: true });
});
"""


def test_a_task_from_the_board_to_done_with_the_agents_streaming_live(page, live_app: LiveApp) -> None:
    # The Planner talks slowly enough to watch; the Coder and Reviewer answer by default.
    live_app.llm.script(ToolReply(input=PLAN, text="Reading the task and planning the change. " * 8, chunk_size=6,
                                  chunk_delay=0.04))  # fmt: skip
    register(page, live_app)
    card = create_task(page, "Add a feature function")
    drag(page, card, "spec")
    page.locator(".column[data-status=spec] .card", has_text="Add a feature function").wait_for()
    page.screenshot(path=str(ARTIFACTS / "board.png"), full_page=True)

    # Each time the Planner's log grows, the page notes its length and the run's status
    # then: read afterwards, a status that moved on meanwhile cannot be mistaken for the
    # one the growth happened under (seen under load: the stream ended before the read).
    page.add_init_script(GROWTH_WATCH)
    page.click(".card-title:text('Add a feature function')")
    page.click("#pipeline-panel .start-form button[type=submit]")
    page.wait_for_function(
        "() => (document.querySelector('[data-log-pane=planner] [data-log-body]')?.innerText || '').length > 20"
    )
    page.screenshot(path=str(ARTIFACTS / "live-run.png"), full_page=True)
    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)
    # The log grew, and grew again, while the run was still planning: the tokens arrive
    # while the call streams, not at its end.
    growth = page.evaluate("window.__plannerGrowth || []")
    while_planning = sorted({length for length, status in growth if status in ("queued", "planning")})
    assert len(while_planning) >= 2 and while_planning[-1] > 20, growth
    assert "Reading the task" in log_text(page, "planner")
    # A project without a repository: the Coder edits a worktree of the project's own.
    coder_log = log_text(page, "coder")
    assert "Writing src/feature.py." in coder_log and "Created tests/test_feature.py" in coder_log
    diff = page.locator("#pipeline-diff")
    diff.locator(".diff-file-header", has_text="src/feature.py").wait_for()
    assert "2 files changed" in diff.locator(".diff-stats").inner_text()
    assert 'return "done"' in diff.inner_text()
    page.locator("#pipeline-panel").screenshot(path=str(ARTIFACTS / "run-panel.png"))
    diff.screenshot(path=str(ARTIFACTS / "diff.png"))

    page.click("#pipeline-panel button:has-text('Approve')")
    page.locator(".run-alert-approved").wait_for()
    page.goto(live_app.url + "/")
    page.locator(".column[data-status=done] .card", has_text="Add a feature function").wait_for()


def test_a_refused_drag_snaps_back_and_says_why(page, live_app: LiveApp) -> None:
    register(page, live_app)
    card = create_task(page, "Straight to done?")
    with page.expect_response(lambda r: "/status" in r.url) as response:
        card.drag_to(page.locator(".column[data-status=done]"))
    assert response.value.status == 400
    toast = page.locator(".toast-error")
    toast.wait_for()
    assert re.search(r"backlog|spec", toast.inner_text(), re.IGNORECASE), toast.inner_text()
    # Back where it was, on the page and after a reload.
    page.locator(".column[data-status=backlog] .card", has_text="Straight to done?").wait_for()
    assert page.locator(".column[data-status=done] .card", has_text="Straight to done?").count() == 0
    page.reload()
    page.locator(".column[data-status=backlog] .card", has_text="Straight to done?").wait_for()


def test_a_paused_run_shows_its_error_and_retry_resumes_it(page, live_app: LiveApp) -> None:
    # The first call and its three retries hit the rate limit: the run pauses.
    live_app.llm.script(*[HttpError(429, "rate_limit_error", "Slow down.") for _ in range(4)])
    register(page, live_app)
    create_task(page, "Survive a rate limit")
    page.click(".card-title:text('Survive a rate limit')")
    page.click("#pipeline-panel .start-form button[type=submit]")

    alert = page.locator(".run-alert-paused")
    alert.wait_for(timeout=RUN_TIMEOUT_MS)
    assert "rate limit" in alert.inner_text()
    assert "Paused while planning" in alert.inner_text()
    page.locator("#pipeline-panel").screenshot(path=str(ARTIFACTS / "paused.png"))

    alert.locator("button:has-text('Retry')").click()
    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)
    assert page.locator("#pipeline-panel").get_attribute("data-run-number") == "1"  # the same run, resumed


def test_on_a_linked_repository_the_agents_read_the_code_the_tests_run_and_approval_merges(
    page, live_app: LiveApp
) -> None:
    import subprocess

    from llm.demo.demo_app import BUGS
    from repos.management.commands.repos_demo import FILES

    folder = live_app.repos_root / f"shop-{time.time_ns()}"
    for name, content in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    for command in (["init", "-q", "--initial-branch=main"], ["add", "-A"], ["commit", "-qm", "Start"]):
        subprocess.run(["git", "-c", "user.name=Dev", "-c", "user.email=dev@example.com", *command], cwd=folder,
                       check=True)  # fmt: skip

    register(page, live_app)
    page.click("nav >> text=Projects")
    page.click("text=Repository")
    page.fill("input[name=path]", folder.name)
    page.locator("form[action$='/repository/link'] input[name=test_command]").fill("python3 run_tests.py")
    page.click("button:has-text('Link repository')")
    status = page.locator("#repository-status")
    assert "clean" in status.inner_text() and "Start" in status.inner_text()
    page.screenshot(path=str(ARTIFACTS / "repository.png"), full_page=True)

    page.goto(live_app.url + "/")
    create_task(page, "Add a feature module")
    page.click(".card-title:text('Add a feature module')")
    page.click("#pipeline-panel .start-form button[type=submit]")
    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)

    coder_log = log_text(page, "coder")  # the Coder looked, and read, before it wrote
    editor = "→ str_replace_based_edit_tool"
    assert f'{editor} {{"command": "view", "path": "."}}' in coder_log
    assert f'{editor} {{"command": "view", "path": "src/inventory.py"}}' in coder_log
    assert "— Subtask 2 of 2: Change that one line —" in coder_log  # it said where it was
    assert f'{editor} {{"command": "str_replace", "path": "src/inventory.py"' in coder_log
    tests_log = log_text(page, "verifier")
    assert "$ python3 run_tests.py" in tests_log
    assert f"PASSED tests/test_inventory.py::{BUGS[0].test_name}" in tests_log
    assert "Tests passed" in page.locator("[data-testid=run-verify]").inner_text()
    found = re.search(r"autocoder/task-\d+-run-1", page.locator("[data-testid=run-branch]").inner_text())
    assert found is not None
    branch = found.group(0)

    page.click("#pipeline-panel button:has-text('Approve')")
    page.locator("[data-testid=run-merged]").wait_for()
    log = subprocess.run(["git", "log", "--format=%s", "main"], cwd=folder, capture_output=True, text=True, check=True)
    assert log.stdout.splitlines()[:2] == [
        f"Merge branch '{branch}' into main",
        "Add a feature module (implementation)",
    ]
    assert BUGS[0].new in (folder / "src" / "inventory.py").read_text()  # the user's checkout follows


def test_the_board_follows_a_failing_runs_card_live_chip_and_cost(page, live_app: LiveApp) -> None:
    # The Planner answers without subtasks twice, slowly enough to watch the board: the run fails.
    invalid = ToolReply(input={"nothing": True}, text="Planning, badly. " * 12, chunk_size=4, chunk_delay=0.05)
    live_app.llm.script(invalid, invalid)
    register(page, live_app)
    card = create_task(page, "Come back when it fails")
    drag(page, card, "spec")
    page.locator(".column[data-status=spec] .card", has_text="Come back when it fails").wait_for()
    page.click(".card-title:text('Come back when it fails')")
    page.click("#pipeline-panel .start-form button[type=submit]")
    page.goto(live_app.url + "/")
    planning = page.locator(".column[data-status=spec] .card", has_text="Come back when it fails")
    planning.locator(".run-chip-planning").wait_for(timeout=RUN_TIMEOUT_MS)
    # Without a reload: the first call's cost shows while the second still streams...
    page.locator(".column[data-status=spec] .card:has(.run-chip-planning) .card-cost").wait_for(timeout=RUN_TIMEOUT_MS)
    # ... then the chip turns to failed, and the card stays in Spec, where it was started from.
    page.locator(".column[data-status=spec] .card .run-chip-failed").wait_for(timeout=RUN_TIMEOUT_MS)
    failed = page.locator(".column[data-status=spec] .card", has_text="Come back when it fails")
    assert failed.locator(".card-cost").inner_text().startswith("$")
    page.screenshot(path=str(ARTIFACTS / "board-failed-run.png"), full_page=True)
