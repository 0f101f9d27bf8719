"""The issue's "done when", end to end, from the browser and from the API: a user links a
repository that holds a 2,000-line file, asks for a one-line change, watches the Coder
view, edit and run the tests live, and approves a one-hunk diff that is then merged.

The model is the fake Anthropic server, scripted call by call; everything else is real:
the embedded server, the worktree, the sandboxed test command, git. The Coder's last call
is held until the test has seen its log, so "live" is checked while the run is still
coding, without racing it.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.pages import create_task, git, log_text, register
from tests.fake_anthropic import FakeAnthropicServer, Held, TextReply, ToolReply
from tests.processes import ApiClient, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

EDITOR = "str_replace_based_edit_tool"
TEST_COMMAND = "python3 run_tests.py"
CHANGED_LINE = 1400  # stock_0700's return, in a module of 1,000 two-line functions
OLD_LINE, NEW_LINE = "    return 700", "    return 750"
TITLE = "Make stock_0700() return 750"
RUN_TESTS = """import sys

import inventory

expected = {"stock_0001": 1, "stock_0700": 750, "stock_1000": 1000}
failures = [
    f"FAIL {name}() == {getattr(inventory, name)()}, expected {value}"
    for name, value in expected.items()
    if getattr(inventory, name)() != value
]
print("\\n".join(failures) or f"{len(expected)} checks passed")
sys.exit(1 if failures else 0)
"""
VIEW = {"command": "view", "path": "inventory.py", "view_range": [CHANGED_LINE - 3, CHANGED_LINE + 3]}
STR_REPLACE = {
    "command": "str_replace",
    "path": "inventory.py",
    "old_str": f"def stock_0700() -> int:\n{OLD_LINE}\n",
    "new_str": f"def stock_0700() -> int:\n{NEW_LINE}\n",
}
# What the Coder's live log shows for each step, in this order.
CODER_STEPS = (
    f"→ {EDITOR} {json.dumps(VIEW)}",
    "→ run_tests",
    "error: The tests failed (exit status 1).",
    f'→ {EDITOR} {{"command": "str_replace", "path": "inventory.py"',
    "→ run_tests",
    "The tests passed (exit status 0).",
)


def make_repository(root: Path) -> tuple[Path, str]:
    """A git repository with a 2,000-line ``inventory.py`` and a test script that wants
    stock_0700() to be 750 (it is 700): its folder and first commit."""
    folder = root / f"inventory-{time.time_ns()}"
    folder.mkdir(parents=True)
    source = "".join(f"def stock_{n:04d}() -> int:\n    return {n}\n" for n in range(1, 1001))
    (folder / "inventory.py").write_text(source)
    (folder / "run_tests.py").write_text(RUN_TESTS)
    assert len(source.splitlines()) == 2000 and source.splitlines()[CHANGED_LINE - 1] == OLD_LINE
    for command in (["init", "-q", "--initial-branch=main"], ["add", "-A"], ["commit", "-qm", "Inventory"]):
        git(folder, *command)
    return folder, git(folder, "rev-parse", "HEAD").strip()


def script_the_agents(llm: FakeAnthropicServer) -> Held:
    """Planner, five Coder turns (view, tests, one str_replace, tests, summary), Reviewer;
    the verify phase between the Coder and the Reviewer runs the tests without the model.
    Returns the Coder's summary, held until the test releases it."""
    summary = Held(TextReply(text="stock_0700() now returns 750 (inventory.py line 1400); the tests pass."))
    plan = {"subtasks": [{"id": "s1", "title": "Change stock_0700", "description": "Return 750", "order": 1}]}
    llm.script(
        ToolReply(name="submit_plan", input=plan, text="One line to change in inventory.py.\n"),
        ToolReply(name=EDITOR, input=VIEW, text="Reading stock_0700 in inventory.py.\n"),
        ToolReply(name="run_tests", input={"note": "should fail before the change"}, text="Tests first.\n"),
        ToolReply(name=EDITOR, input=STR_REPLACE, text="Changing the one line.\n"),
        ToolReply(name="run_tests", input={}, text="Tests again.\n"),
        summary,
        ToolReply(name="submit_review", input={"pass": True, "findings": []}, text="One line, as asked.\n"),
    )
    return summary


def assert_in_order(text: str, steps: tuple[str, ...]) -> None:
    position = 0
    for step in steps:
        found = text.find(step, position)
        assert found >= 0, f"{step!r} missing after position {position} in:\n{text}"
        position = found + len(step)


def assert_the_model_saw_the_file(llm: FakeAnthropicServer) -> None:
    """Every scripted reply was taken, each by the call it was meant for, and the view
    answered the lines around the one to change."""
    assert llm.pending == 0
    requests = llm.requests
    assert len(requests) == 7, [request.answer_tool for request in requests]
    assert requests[0].forced_tool == "submit_plan"
    assert all(EDITOR in request.tool_names for request in requests[1:6])
    assert requests[6].answer_tool == "submit_review" and EDITOR not in requests[6].tool_names
    viewed = str(requests[2].tool_results[-1]["content"])
    assert re.search(rf"\b{CHANGED_LINE}\b.*return 700", viewed), viewed


def assert_main_has_the_one_line_change(folder: Path, start: str) -> None:
    changed = git(folder, "diff", "--unified=0", start, "main")
    hunks = re.findall(r"^@@ .*$", changed, re.MULTILINE)
    assert len(hunks) == 1 and hunks[0].startswith(f"@@ -{CHANGED_LINE} +{CHANGED_LINE} @@"), changed
    assert [line for line in changed.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        f"-{OLD_LINE}",
        f"+{NEW_LINE}",
    ]
    # The user's checkout follows the merge.
    lines = (folder / "inventory.py").read_text().splitlines()
    assert len(lines) == 2000 and lines[CHANGED_LINE - 1] == NEW_LINE


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed (apt-get install chromium)")
def test_in_the_browser_a_one_line_change_to_a_2000_line_file_is_watched_live_and_merged(
    page, live_app: LiveApp
) -> None:
    folder, start = make_repository(live_app.repos_root)
    summary = script_the_agents(live_app.llm)

    register(page, live_app)
    page.click("nav >> text=Projects")
    page.click("text=Repository")
    page.fill("input[name=path]", folder.name)
    page.locator("form[action$='/repository/link'] input[name=test_command]").fill(TEST_COMMAND)
    page.click("button:has-text('Link repository')")
    assert "Inventory" in page.locator("#repository-status").inner_text()

    page.goto(live_app.url + "/")
    create_task(page, TITLE)
    page.click(f".card-title:text('{TITLE}')")
    page.click("#pipeline-panel .start-form button[type=submit]")

    # Live: the Coder has viewed, run the tests, edited and run them again, and is still
    # coding (its summary is held back).
    page.wait_for_function(
        "() => (document.querySelector('[data-log-pane=coder] [data-log-body]')?.textContent || '')"
        ".includes('The tests passed (exit status 0).')",
        timeout=RUN_TIMEOUT_MS,
    )
    page.locator("#pipeline-panel[data-run-status=coding]").wait_for()
    coder_log = log_text(page, "coder")
    assert_in_order(coder_log, CODER_STEPS)
    assert "FAIL stock_0700() == 700, expected 750" in coder_log  # the failing run's output streamed
    page.screenshot(path=str(ARTIFACTS / "one-line-change-coding.png"), full_page=True)
    summary.release.set()

    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)
    assert "$ python3 run_tests.py" in log_text(page, "verifier")
    assert "Tests passed" in page.locator("[data-testid=run-verify]").inner_text()
    diff = page.locator("#pipeline-diff")
    assert "1 file changed" in diff.locator(".diff-stats").inner_text()
    assert diff.locator(".diff-file-header").inner_text().count("inventory.py") == 1
    hunks = diff.locator(".diff-row.diff-hunk")
    assert hunks.count() == 1
    assert hunks.inner_text().strip() == f"@@ -{CHANGED_LINE - 3},7 +{CHANGED_LINE - 3},7 @@"
    assert diff.inner_text().count("@@") == 2  # the one hunk header's two markers
    assert diff.locator(".diff-row.diff-del .diff-code").inner_text().strip() == OLD_LINE.strip()
    assert diff.locator(".diff-row.diff-add .diff-code").inner_text().strip() == NEW_LINE.strip()
    diff.screenshot(path=str(ARTIFACTS / "one-line-change-diff.png"))

    page.click("#pipeline-panel button:has-text('Approve')")
    page.locator("[data-testid=run-merged]").wait_for()
    assert_main_has_the_one_line_change(folder, start)
    assert_the_model_saw_the_file(live_app.llm)


def coder_log_over_api(api: ApiClient, task_id: int) -> str:
    """The Coder's log so far, from the task's event stream (``follow=false`` ends it)."""
    status, stream = api.get(f"/api/tasks/{task_id}/events?follow=false")
    assert status == 200, stream
    chunks = []
    for frame in str(stream).split("\n\n"):
        data = [line[len("data: ") :] for line in frame.splitlines() if line.startswith("data: ")]
        if data:
            message: dict[str, Any] = json.loads(data[0])
            if message["type"] == "agent-log" and message["data"]["agent"] == "coder":
                chunks.append(message["data"]["chunk"])
    return "".join(chunks)


def test_over_the_api_a_one_line_change_to_a_2000_line_file_is_watched_live_and_merged(live_app: LiveApp) -> None:
    live_app.llm.reset()
    folder, start = make_repository(live_app.repos_root)
    summary = script_the_agents(live_app.llm)
    api = ApiClient(live_app.url)
    api.sign_up(f"api-{time.time_ns()}@example.com", "correct horse battery staple")

    status, projects = api.get("/api/projects")
    assert status == 200, projects
    project_id = projects["results"][0]["id"]
    status, repository = api.request(
        "PUT", f"/api/projects/{project_id}/repository", {"path": folder.name, "test_command": TEST_COMMAND}
    )
    assert status == 200, repository
    assert repository["state"]["clean"] and repository["state"]["head_subject"] == "Inventory"
    status, task = api.post("/api/tasks", {"title": TITLE, "description": "Only that line.", "category": "feature"})
    assert status == 201, task
    status, run = api.post(f"/api/tasks/{task['id']}/start-pipeline")
    assert status == 202, run

    def watched() -> bool:
        return "The tests passed (exit status 0)." in coder_log_over_api(api, task["id"])

    wait_for(watched, RUN_TIMEOUT_MS / 1000, lambda: live_app.output())
    assert_in_order(coder_log_over_api(api, task["id"]), CODER_STEPS)
    status, body = api.get(f"/api/runs/{run['id']}")
    assert (status, body["status"]) == (200, "coding")  # live: the Coder's summary is held back
    summary.release.set()

    def awaiting() -> bool:
        nonlocal body
        body = api.get(f"/api/runs/{run['id']}")[1]
        assert body["status"] not in ("failed", "paused", "cancelled"), body
        return body["status"] == "awaiting_approval"

    wait_for(awaiting, RUN_TIMEOUT_MS / 1000, lambda: f"{body}\n{live_app.output()}")
    assert body["verify_result"]["passed"] is True
    status, diff = api.get(f"/api/runs/{run['id']}/diff")
    assert status == 200, diff
    assert diff["stats"] == {"files_changed": 1, "lines_added": 1, "lines_removed": 1}
    [changed] = diff["files"]
    assert (changed["path"], changed["action"]) == ("inventory.py", "modify")
    hunks = re.findall(r"^@@.*$", changed["diff"], re.MULTILINE)
    assert hunks == [f"@@ -{CHANGED_LINE - 3},7 +{CHANGED_LINE - 3},7 @@"]
    assert f"\n-{OLD_LINE}\n+{NEW_LINE}\n" in changed["diff"]

    status, approved = api.post(f"/api/runs/{run['id']}/approve")
    assert status == 200, approved
    assert approved["status"] == "approved" and approved["merge_result"]["commit"]
    assert git(folder, "rev-parse", "main").strip() == approved["merge_result"]["commit"]
    assert_main_has_the_one_line_change(folder, start)
    assert_the_model_saw_the_file(live_app.llm)
