"""The run panel's diff is made once per commit of the run's branch: a refresh of a run
that did not change runs neither git nor Pygments, and a new round of changes (a new
head commit) shows its own diff."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from pipelines.models import PipelineRun, RunStatus
from pipelines.review import diff as review_diff
from pipelines.review.selectors import run_diff
from pipelines.review.services import line_comment_create, run_request_changes
from repos import git as repos_git
from tests.fake_anthropic import ToolReply, coder_replaces
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PASS = {"pass": True, "findings": []}


@pytest.fixture
def calls(monkeypatch) -> dict[str, int]:
    """How many git commands (each one a sandboxed process) and Pygments highlightings
    ran since the test began counting."""
    counted = {"git": 0, "highlight": 0}

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return original(*args, **kwargs)

        return call

    monkeypatch.setattr(repos_git, "run_confined", counting("git", repos_git.run_confined))
    monkeypatch.setattr(review_diff, "highlight", counting("highlight", review_diff.highlight))
    return counted


def _panel(browser: Client, run: PipelineRun) -> str:
    """The panel as an htmx refresh fetches it (its forms' CSRF tokens left out: each
    response masks the token anew)."""
    response = browser.get(reverse("pipelines:panel", args=[run.task_id]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", response.content.decode())


def test_a_refresh_of_an_unchanged_run_runs_neither_git_nor_pygments(awaiting_run, owner, calls) -> None:
    browser = Client()
    browser.force_login(owner)

    first = _panel(browser, awaiting_run)
    assert calls["git"] and calls["highlight"]  # made once, from the branch
    assert 'data-new-line="15"' in first and "fifteen" in first

    calls.update(git=0, highlight=0)
    second = _panel(browser, awaiting_run)
    assert calls == {"git": 0, "highlight": 0}
    assert second == first
    # A line comment checks its lines against the same diff, without git either.
    line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=15, body="Why a string?")
    assert calls == {"git": 0, "highlight": 0}


def test_the_kept_diff_is_the_diff_made_from_the_branch(awaiting_run, settings, calls) -> None:
    run_diff(run=awaiting_run)
    calls.update(git=0, highlight=0)
    kept = run_diff(run=awaiting_run)
    assert calls == {"git": 0, "highlight": 0}
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    made = run_diff(run=awaiting_run)
    assert kept.as_dict() == made.as_dict()
    assert [file.rows for file in kept.files] == [file.rows for file in made.files]


def test_a_new_round_of_changes_shows_its_own_diff(fake_llm, awaiting_run, owner, calls) -> None:
    browser = Client()
    browser.force_login(owner)
    assert "fifteen" in _panel(browser, awaiting_run)
    first_head = awaiting_run.head_commit

    awaiting_run.task.project.learn_distil = False
    awaiting_run.task.project.save()
    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 'XV'\n"), ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=awaiting_run, actor=owner, feedback="Roman numerals"))
    assert run.status == RunStatus.AWAITING_APPROVAL and run.head_commit != first_head

    calls.update(git=0, highlight=0)
    html = _panel(browser, run)
    assert calls["git"] and calls["highlight"]
    assert "XV" in html and "fifteen" not in html
