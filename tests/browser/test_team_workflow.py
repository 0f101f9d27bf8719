"""The team workflow, as a person does it in the browser: link a repository whose remote
is a bare repository on the server and a forge (the fake one), comment on two lines of
the diff, request changes, see the round that addressed both, open a pull request, and
see the task move to Done when the forge reports it merged (by its signed webhook)."""

from __future__ import annotations

import os
import re
import time
import urllib.request

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, RUN_TIMEOUT_MS, LiveApp
from tests.browser.pages import create_task, line_comment_plus, register
from tests.browser.pages import git as run_git
from tests.fake_forge import FakeForge

if not os.path.exists(CHROMIUM):
    # .ci/run installs Chromium and fails if this skip appears there.
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

TOKEN = "ghp_browser-forge-token"


def test_comments_then_a_pull_request_merged_on_the_forge(page, live_app: LiveApp) -> None:  # type: ignore[no-untyped-def]
    from llm.demo.demo_app import BUGS
    from repos.management.commands.repos_demo import FILES

    stamp = time.time_ns()
    folder = live_app.repos_root / f"shop-{stamp}"
    for name, content in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    for command in (["init", "-q", "--initial-branch=main"], ["add", "-A"], ["commit", "-qm", "Start"]):
        run_git(folder, *command)
    remote = live_app.repos_root / f"shop-{stamp}-remote.git"
    run_git(live_app.repos_root, "clone", "-q", "--bare", str(folder), str(remote))
    forge = FakeForge().start()
    forge.add_repository("team/shop", git_dir=remote)
    forge.add_token(TOKEN)
    try:
        register(page, live_app)
        page.click("nav >> text=Projects")
        page.click("text=Repository")
        page.fill("input[name=path]", folder.name)
        page.click("button:has-text('Link repository')")
        page.locator("#repository-status").wait_for()

        pull_requests = page.locator("#pull-requests")
        pull_requests.locator("input[name=push_url]").fill(str(remote))
        pull_requests.locator("select[name=forge_kind]").select_option("github")
        pull_requests.locator("input[name=forge_api_url]").fill(forge.api_url("github"))
        pull_requests.locator("input[name=forge_repository]").fill("team/shop")
        pull_requests.locator("input[name=token]").fill(TOKEN)
        pull_requests.locator("button[type=submit]").click()
        page.locator("text=Pull request settings saved.").wait_for()
        assert TOKEN not in page.content()
        hook = page.locator("[data-testid=forge-webhook]").inner_text()
        webhook_url = re.search(r"https?://\S+/api/forges/webhooks/\d+", hook).group(0)  # type: ignore[union-attr]
        secret = page.locator("[data-testid=forge-webhook] dd code").nth(1).inner_text()

        page.goto(live_app.url + "/")
        create_task(page, "Add a feature module")
        page.click(".card-title:text('Add a feature module')")
        page.click("#pipeline-panel .start-form button[type=submit]")
        page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)

        # Two comments on two lines of the diff, then a request for changes.
        file = page.locator("#pipeline-diff .diff-file").first
        form = page.locator("[data-testid=line-comment-form]")
        # The demo model's one-line fix in the big module (its first diff file), and a line above it.
        fixed = FILES["src/inventory.py"].split("\n").index(BUGS[0].old) + 1
        for line, words in ((fixed - 2, "Say what this method is for"), (fixed, "Name this better")):
            line_comment_plus(file, line).click()
            form.locator("textarea").fill(words)
            form.locator("button[type=submit]").click()
            page.locator("[data-testid=line-comment]", has_text=words).wait_for()
        page.fill("#pipeline-panel textarea[name=feedback]", "Please address my two comments")
        page.click("#pipeline-panel button:has-text('Request changes')")
        history = page.locator("[data-testid=line-comment-history]")
        history.wait_for(timeout=RUN_TIMEOUT_MS)
        page.locator(".run-alert-ready").wait_for(timeout=RUN_TIMEOUT_MS)  # the Coder's round, reviewed again
        assert history.locator("[data-testid=sent-line-comment]").count() == 2
        assert "Sent with request for changes 1" in history.inner_text()
        # The Coder got both, with the quoted code.
        coder_prompts = [r.prompt_text for r in live_app.llm.requests if "Say what this method is for" in r.prompt_text]
        assert coder_prompts and "Name this better" in coder_prompts[-1]

        page.click("#pipeline-panel button:has-text('Open pull request')")
        link = page.locator("[data-testid=run-pull-request] a")
        link.wait_for()
        assert link.inner_text() == "#1" and link.get_attribute("href") == forge.html_url("github", "team/shop", 1)
        branch = forge.repositories["team/shop"].pulls[1].head
        assert run_git(remote, "rev-parse", branch) == run_git(folder, "rev-parse", branch)
        page.locator("#pipeline-panel").screenshot(path=str(ARTIFACTS / "pull-request.png"))

        # Merged on the forge: its webhook tells the server, and the task is Done.
        forge.set_state("team/shop", 1, "merged")
        body, headers = forge.webhook("github", "team/shop", 1, secret=secret)
        request = urllib.request.Request(webhook_url, body, {**headers, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        page.goto(live_app.url + "/")
        done = page.locator(".column[data-status=done] .card", has_text="Add a feature module")
        done.wait_for()
        assert "PR #1 · merged" in done.inner_text()
    finally:
        forge.stop()
