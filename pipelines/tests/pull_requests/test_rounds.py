"""The forge asks for changes on a run's pull request: the run goes back to the Coder
through the one door (``pull_request_round_start``), told who asked, learning nothing from
a machine's words, and the round's commits reach the same branch on the forge as a
fast-forward — or, when the push fails, are kept and pushed by the next poll."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipelines.models import FeedbackOrigin, PullRequest, RunStatus, RunTransition
from pipelines.pull_requests.poll import pull_requests_poll
from pipelines.pull_requests.rounds import NOT_AWAITING_ROUND, pull_request_round_start
from pipelines.pull_requests.services import run_open_pull_request
from pipelines.runs.services import InvalidTransition
from pipelines.tests.pull_requests.test_pull_requests import awaiting_run, git, set_forge
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

CHECKS_FEEDBACK = "The check `unit` failed:\n```\nAssertionError: add(2, 3) is -1\n```"
SECOND_EDIT = ToolReply(
    name=EDITOR,
    input={
        "command": "str_replace",
        "path": "app/calc.py",
        "old_str": "def add(a, b):",
        "new_str": "def add(a, b):  # sum",
    },
)
REVIEW_PASSES = ToolReply(input={"pass": True, "findings": []})


def round_from_checks(fake_llm, pull_request: PullRequest):  # type: ignore[no-untyped-def]
    fake_llm.script(SECOND_EDIT, TextReply("Fixed the check."), REVIEW_PASSES)
    run = pull_request_round_start(pull_request=pull_request, feedback=CHECKS_FEEDBACK, origin=FeedbackOrigin.CHECKS)
    assert run.status == RunStatus.CODING
    return drive_in_process(run)


def test_a_round_the_checks_asked_for_reaches_the_same_branch_as_a_fast_forward(
    fake_llm, forge, linked, remote, task, owner
) -> None:  # type: ignore[no-untyped-def]
    set_forge(linked, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    pull_request = run_open_pull_request(run=run, actor=owner)
    first_head = git(remote, "rev-parse", run.branch)
    assert pull_request.pushed_head == first_head == run.head_commit

    run = round_from_checks(fake_llm, pull_request)
    assert run.status == RunStatus.AWAITING_APPROVAL and run.head_commit != first_head
    coder = [r for r in fake_llm.requests if EDITOR in r.tool_names][-1]
    assert "# Changes requested by the pull request's checks\n" + CHECKS_FEEDBACK in coder.prompt_text
    # A CI log teaches nothing: no distiller call was made for it.
    assert not any(r.forced_tool == "record_lessons" for r in fake_llm.requests)
    reasons = list(RunTransition.objects.filter(run=run).values_list("reason", flat=True))
    assert "changes requested by the pull request's checks" in reasons
    # Pushed after the round: the forge's branch moved forward to the run's head.
    assert git(remote, "rev-parse", run.branch) == run.head_commit
    git(remote, "merge-base", "--is-ancestor", first_head, run.head_commit)
    assert PullRequest.objects.get().pushed_head == run.head_commit


def test_a_push_that_fails_after_a_round_is_kept_and_pushed_by_the_poll(
    fake_llm, forge, linked, remote, task, owner
) -> None:  # type: ignore[no-untyped-def]
    set_forge(linked, forge, remote, "gitlab", owner)
    run = awaiting_run(fake_llm, task, owner)
    pull_request = run_open_pull_request(run=run, actor=owner)
    first_head = pull_request.pushed_head
    away = Path(str(remote) + ".away")
    shutil.move(remote, away)  # the forge's git is gone for a while
    try:
        run = round_from_checks(fake_llm, pull_request)
    finally:
        shutil.move(away, remote)
    pull_request.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert pull_request.pushed_head == first_head and pull_request.error
    assert git(remote, "rev-parse", run.branch) == first_head

    assert pull_requests_poll(older_than_seconds=0) == 1
    pull_request.refresh_from_db()
    assert (pull_request.pushed_head, pull_request.error) == (run.head_commit, "")
    assert git(remote, "rev-parse", run.branch) == run.head_commit


def test_the_forge_asks_only_of_a_run_awaiting_approval(fake_llm, forge, linked, remote, task, owner) -> None:  # type: ignore[no-untyped-def]
    set_forge(linked, forge, remote, "gitea", owner)
    run = awaiting_run(fake_llm, task, owner)
    pull_request = run_open_pull_request(run=run, actor=owner)
    pull_request_round_start(pull_request=pull_request, feedback="again", origin=FeedbackOrigin.CHECKS)
    pull_request.refresh_from_db()
    with pytest.raises(InvalidTransition) as refused:
        pull_request_round_start(pull_request=pull_request, feedback="more", origin=FeedbackOrigin.CHECKS)
    assert refused.value.message == NOT_AWAITING_ROUND.format(status="coding")
