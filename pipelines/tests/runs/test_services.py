"""A run's own API key lives as long as the run can use it: deleted in the same update
as every transition that ends the run, kept while it is paused for a person's Retry."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from core.crypto import decrypt_secret
from pipelines.models import FINAL_STATUSES, RUN_TRANSITIONS, PipelineRun, RunStatus
from pipelines.review.services import run_approve
from pipelines.runs.services import run_cancel, run_retry, run_start, run_transition
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import HttpError, TextReply, ToolReply, coder_creates
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

USER_KEY = "sk-ant-user-own-key-0123456789"
PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CODER = coder_creates("app/x.py", "x = 1\n")
PASS = {"pass": True, "findings": []}
FAIL = {"pass": False, "findings": [{"file": "app/x.py", "line": 1, "severity": "major", "message": "x must be 2"}]}


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


@pytest.fixture
def keyed(fake_llm, task: Task, owner, settings) -> PipelineRun:
    """A run started with the user's own key (the server has none)."""
    settings.ANTHROPIC_API_KEY = ""
    run = run_start(task=task, user=owner, api_key=USER_KEY)
    assert decrypt_secret(run.api_key_encrypted) == USER_KEY
    return run


def stored_key(run: PipelineRun) -> str:
    return PipelineRun.objects.values_list("api_key_encrypted", flat=True).get(pk=run.pk)


def sent_keys(fake_llm) -> set[str]:
    headers = [request.headers for request in fake_llm.requests]
    return {sent.get("X-Api-Key", "") + sent.get("Authorization", "") for sent in headers}


def test_an_approved_run_forgets_its_key(fake_llm, keyed: PipelineRun, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    run = drive_in_process(keyed)
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert stored_key(run), "request changes still needs it"
    run = run_approve(run=run, actor=owner)
    assert run.status == RunStatus.APPROVED
    assert stored_key(run) == "" == run.api_key_encrypted


def test_a_run_failed_by_the_api_forgets_its_key(fake_llm, keyed: PipelineRun) -> None:
    fake_llm.script(HttpError(401, "authentication_error"))
    run = drive_in_process(keyed)
    assert run.status == RunStatus.FAILED
    assert stored_key(run) == ""


def test_a_run_whose_reviews_never_pass_forgets_its_key(fake_llm, keyed: PipelineRun) -> None:
    fake_llm.script(
        ToolReply(input=PLAN),
        *[reply for _ in range(3) for reply in (TextReply("Nothing to change."), ToolReply(input=FAIL))],
    )
    run = drive_in_process(keyed)
    assert run.status == RunStatus.FAILED
    assert stored_key(run) == ""


def test_a_cancelled_run_forgets_its_key_in_every_active_state(fake_llm, keyed: PipelineRun, owner) -> None:
    # Cancelled while queued...
    run = run_cancel(run=keyed, actor=owner)
    assert run.status == RunStatus.CANCELLED
    assert stored_key(run) == ""
    # ... and while paused, awaiting a person.
    again = run_start(task=run.task, user=owner, api_key=USER_KEY)
    fake_llm.script(*[HttpError(529, "overloaded_error") for _ in range(4)])
    again = drive_in_process(again)
    assert again.status == RunStatus.PAUSED
    assert stored_key(again)
    run_cancel(run=again, actor=owner)
    assert stored_key(again) == ""


def test_a_superseded_run_forgets_its_key_and_the_new_run_has_the_one_given(
    fake_llm, keyed: PipelineRun, owner
) -> None:
    fake_llm.script(ToolReply(input=PLAN), *CODER, ToolReply(input=PASS))
    old = drive_in_process(keyed)
    new = run_retry(run=old, actor=owner, api_key="sk-ant-another-key-9876543210")
    old.refresh_from_db()
    assert old.status == RunStatus.CANCELLED
    assert stored_key(old) == ""
    assert decrypt_secret(stored_key(new)) == "sk-ant-another-key-9876543210"


def test_a_paused_run_keeps_its_key_and_retry_uses_it(fake_llm, keyed: PipelineRun, owner) -> None:
    fake_llm.script(ToolReply(input=PLAN), *[HttpError(529, "overloaded_error") for _ in range(4)])
    run = drive_in_process(keyed)
    assert run.status == RunStatus.PAUSED
    assert decrypt_secret(stored_key(run)) == USER_KEY

    fake_llm.reset()
    fake_llm.script(*CODER, ToolReply(input=PASS))
    run = drive_in_process(run_retry(run=run, actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    keys = sent_keys(fake_llm)
    assert keys and all(USER_KEY in key for key in keys)


@pytest.mark.parametrize(
    ("from_status", "to_status"),
    [
        (source, target)
        for source, targets in RUN_TRANSITIONS.items()
        for target in sorted(targets)
        if target in FINAL_STATUSES
    ],
)
def test_every_transition_that_ends_a_run_deletes_its_key_in_the_same_update(
    keyed: PipelineRun, from_status: str, to_status: str
) -> None:
    PipelineRun.objects.filter(pk=keyed.pk).update(status=from_status)
    keyed.refresh_from_db()
    run = run_transition(run=keyed, to_status=to_status, enqueue=False)
    assert stored_key(run) == ""


@pytest.mark.parametrize(
    ("from_status", "to_status"),
    [
        (source, target)
        for source, targets in RUN_TRANSITIONS.items()
        for target in sorted(targets)
        if target not in FINAL_STATUSES
    ],
)
def test_a_transition_that_does_not_end_the_run_keeps_its_key(
    keyed: PipelineRun, from_status: str, to_status: str
) -> None:
    PipelineRun.objects.filter(pk=keyed.pk).update(status=from_status)
    keyed.refresh_from_db()
    run = run_transition(run=keyed, to_status=to_status, enqueue=False)
    assert decrypt_secret(stored_key(run)) == USER_KEY


def test_the_migration_forgets_the_keys_of_runs_that_ended_before(keyed: PipelineRun, owner) -> None:
    ended = run_start(task=TaskFactory(project=keyed.task.project), user=owner, api_key=USER_KEY)
    PipelineRun.objects.filter(pk=ended.pk).update(status=RunStatus.APPROVED)
    migration = importlib.import_module("pipelines.migrations.0004_forget_api_keys_of_finished_runs")
    migration.forget_keys(apps, None)
    assert stored_key(ended) == ""
    assert decrypt_secret(stored_key(keyed)) == USER_KEY, "a run still active keeps its key"
