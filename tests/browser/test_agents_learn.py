"""The issue "Agents that learn", done when: a user requests a change on one task, starts
another task of the project, and sees on the new run's page the memory the Coder was
given and where it came from; the Memory page explains it.

The model is the fake Anthropic server answering as the demo model does, except for the
distillation call, whose lesson is the test's own wording: a lesson that differs from
what the person typed proves it went through the model.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.pages import create_task, register
from tests.fake_anthropic import RecordedRequest, ToolReply, default_reply

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

FIRST = "Add an API endpoint that lists orders as JSON"
SECOND = "Add an API endpoint that lists customers as JSON"
FEEDBACK = "Use snake_case for API fields"
LESSON = "Name API response fields in snake_case, e.g. order_id."


def distils_to(lesson: str):
    """The demo model's answers, but the distillation call answers ``lesson``."""

    def reply(request: RecordedRequest):
        if request.answer_tool == "record_lessons":
            return ToolReply(input={"lessons": [lesson]}, text="Keeping what holds beyond this change.\n")
        return default_reply(request)

    return reply


def start_and_wait_until_ready(page, app: LiveApp, title: str) -> tuple[str, str]:
    """Open the task, start its run, wait until it awaits approval: the task's and the
    run's ids."""
    page.goto(app.url + "/")
    page.click(f".card-title:text('{title}')")
    page.wait_for_url(re.compile(r"/tasks/\d+$"))
    task = page.url.rsplit("/", 1)[1]
    page.click("#pipeline-panel .start-form button[type=submit]")
    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)
    return task, page.locator("#pipeline-panel").get_attribute("data-run-id") or ""


def test_a_request_for_changes_is_recalled_by_the_next_tasks_coder_and_explained(page, live_app: LiveApp) -> None:
    live_app.llm.fallback = distils_to(LESSON)
    register(page, live_app)
    create_task(page, FIRST)
    create_task(page, SECOND)

    first_task, first_run = start_and_wait_until_ready(page, live_app, FIRST)
    assert first_run.isdigit()
    form = page.locator("#pipeline-panel form.request-changes")
    form.locator("textarea[name=feedback]").fill(FEEDBACK)
    with page.expect_response(lambda r: r.url.endswith(f"/runs/{first_run}/request-changes")) as response:
        form.locator("button[type=submit]").click()
    assert response.value.ok
    page.locator("#pipeline-panel .run-feedback", has_text=FEEDBACK).wait_for()
    page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)
    # The run says what it taught: the lesson as the model distilled it, for the Coder.
    taught = page.locator("[data-testid=run-lessons] .lesson-moment[data-kind=feedback]")
    assert "From the request for changes" in taught.inner_text()
    assert "distilled by the model" in taught.inner_text()
    assert LESSON in taught.inner_text() and "for the Coder" in taught.inner_text()
    [distilled] = [r for r in live_app.llm.requests if r.answer_tool == "record_lessons"]
    assert FEEDBACK in distilled.prompt_text

    second_task, second_run = start_and_wait_until_ready(page, live_app, SECOND)
    assert second_run.isdigit() and second_run != first_run
    # The second task's Coder was told the lesson in its system prompt...
    coder_systems = [r.system_text for r in live_app.llm.requests if "str_replace_based_edit_tool" in r.tool_names]
    assert coder_systems and LESSON in coder_systems[-1]
    # ...and its run page says so, and where the lesson came from.
    recalled = page.locator("[data-testid=run-recalled]")
    assert "What the agents recalled" in recalled.inner_text()
    coder = recalled.locator("details.recalled-agent[data-agent=coder]")
    coder.locator("summary").click()
    memory = coder.locator("li", has_text=LESSON)
    assert memory.count() == 1
    source = memory.locator("span.recalled-source")
    assert source.get_attribute("data-source") == "distilled"
    link = source.locator("a")
    # Runs are named as their pages name them: by their number within their task.
    assert link.inner_text() == f"Distilled from run 1 of task #{first_task}"
    assert link.get_attribute("href") == f"/memory/runs/{first_run}/lineage"
    assert f"Distilled from the request for changes in run 1 of task #{first_task} “{FIRST}”" in source.inner_text()
    assert re.search(r"score \d\.\d\d", memory.inner_text()), memory.inner_text()
    # Only the Coder was given it: a lesson from a request for changes is the Coder's.
    for agent in ("planner", "reviewer"):
        summary = recalled.locator(f"details.recalled-agent[data-agent={agent}] summary").inner_text()
        assert "0 memories" in summary, summary
    assert "1 memory" in coder.locator("summary").inner_text()
    page.locator("#pipeline-panel").screenshot(path=str(ARTIFACTS / "agents-learn-recalled.png"))

    # The source link leads to the first run's lineage.
    link.click()
    page.wait_for_url(f"{live_app.url}/memory/runs/{first_run}/lineage")
    assert page.locator("h1").inner_text() == "Run 1"
    assert FIRST in page.locator(".breadcrumbs").inner_text()

    # The Memory page explains the memory: where it came from, who used it, when it fades.
    page.goto(live_app.url + "/memory/recall")
    item = page.locator(".recall-item", has_text=LESSON)
    assert item.count() == 1
    source_line = item.locator(".recall-source")
    assert source_line.locator("a").inner_text() == f"Distilled from run 1 of task #{first_task}"
    assert source_line.locator("a").get_attribute("href") == f"/memory/runs/{first_run}/lineage"
    assert (
        f"Distilled from the request for changes in run 1 of task #{first_task} “{FIRST}”" in source_line.inner_text()
    )
    uses = item.locator(".recall-uses").inner_text()
    assert re.search(rf"by 1 run — latest: run 1 of task #{second_task} \(coder\)", uses), uses
    assert item.locator(".recall-uses a").get_attribute("href") == f"/memory/runs/{second_run}/lineage"
    assert re.match(r"Fades out \w{3} \d{1,2}, \d{4} \d\d:\d\d$", item.locator(".recall-fade").inner_text()), (
        item.locator(".recall-fade").inner_text()
    )
    assert "coder" in item.locator(".recall-meta").first.inner_text()
    page.screenshot(path=str(ARTIFACTS / "agents-learn-memory-page.png"), full_page=True)
