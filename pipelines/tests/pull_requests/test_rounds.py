"""The forge asks for changes on a run's pull request: the run goes back to the Coder
through the one door (``pull_request_round_start``), told who asked, learning nothing from
a machine's words, and the round's commits reach the same branch on the forge as a
fast-forward — or, when the push fails, are kept and pushed by the next poll. And two
loose ends of the first forge round: a pull request opened by hand for the run's branch is
adopted, and webhook deliveries are forgotten after their retention."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from core.crypto import decrypt_secret
from llm.demo.forge.pulls import open_by_hand
from pipelines.models import FeedbackOrigin, ForgeDelivery, PullRequest, RunStatus, RunTransition
from pipelines.pull_requests.poll import pull_requests_poll
from pipelines.pull_requests.rounds import NOT_AWAITING_ROUND, pull_request_round_start
from pipelines.pull_requests.services import run_open_pull_request
from pipelines.runs.services import InvalidTransition
from pipelines.tasks import pipeline_forget_forge_deliveries
from pipelines.tests.pull_requests.test_pull_requests import awaiting_run, git, http_headers, set_forge
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
    subject = git(remote, "log", "-1", "--format=%s", run.branch)
    assert subject == f"{run.task.title} (fixes for the pull request's failing checks)"


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


@pytest.mark.parametrize("kind", ["github", "gitlab", "gitea"])
def test_a_pull_request_opened_by_hand_for_the_branch_is_adopted(
    fake_llm, forge, linked, remote, task, owner, owner_client, client, kind
) -> None:  # type: ignore[no-untyped-def]
    set_forge(linked, forge, remote, kind, owner)
    run = awaiting_run(fake_llm, task, owner)
    # Someone else's pull request from another branch, then one for the run's branch.
    open_by_hand(forge, "team/calc", "feature/other", "main", "Another change")
    by_hand = open_by_hand(forge, "team/calc", run.branch, "main", "My own title")

    opened = owner_client.post(f"/api/runs/{run.pk}/pull-request")
    assert opened.status_code == 201, opened.json()
    assert (opened.json()["number"], opened.json()["adopted"]) == (by_hand.number, True)
    assert len(forge.repositories["team/calc"].pulls) == 2  # none opened twice
    assert git(remote, "rev-parse", run.branch) == run.head_commit  # still pushed
    client.force_login(owner)
    page = client.get(f"/tasks/{task.pk}").content.decode()
    assert "opened there by hand for this branch" in page


def test_a_refusal_with_no_open_pull_request_for_the_branch_is_still_a_refusal(
    fake_llm, forge, linked, remote, task, owner, owner_client
) -> None:  # type: ignore[no-untyped-def]
    set_forge(linked, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    open_by_hand(forge, "team/calc", run.branch, "main", "Closed one")
    forge.set_state("team/calc", 1, "closed")
    forge.fail_next.append(422)

    refused = owner_client.post(f"/api/runs/{run.pk}/pull-request")
    assert refused.status_code == 400 and refused.json()["extra"]["reason"] == "forge_refused"
    assert not PullRequest.objects.exists()


def test_deliveries_are_forgotten_after_the_retention_and_a_late_replay_changes_nothing(
    fake_llm, forge, linked, remote, task, owner, client, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.FORGE_DELIVERY_RETENTION_DAYS = 30
    repository = set_forge(linked, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    forge.set_state("team/calc", 1, "merged")
    secret = decrypt_secret(repository.forge_webhook_secret_encrypted)
    delivery, headers = forge.webhook("github", "team/calc", 1, secret=secret)
    hook = f"/api/forges/webhooks/{repository.pk}"
    assert client.post(hook, delivery, content_type="application/json", **http_headers(headers)).json() == {
        "outcome": "applied"
    }
    recent = ForgeDelivery.objects.create(repository=repository, body_sha256="b" * 64)
    ForgeDelivery.objects.exclude(pk=recent.pk).update(received_at=timezone.now() - timedelta(days=31))

    assert pipeline_forget_forge_deliveries() == 1
    assert list(ForgeDelivery.objects.values_list("pk", flat=True)) == [recent.pk]
    # Sent again after it was forgotten: taken, and the run stays approved once.
    again = client.post(hook, delivery, content_type="application/json", **http_headers(headers))
    assert again.json() == {"outcome": "applied"}
    run.refresh_from_db()
    assert run.status == RunStatus.APPROVED
    assert RunTransition.objects.filter(run=run, to_status=RunStatus.APPROVED).count() == 1
