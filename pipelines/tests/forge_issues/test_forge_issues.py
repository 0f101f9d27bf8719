"""Forge issues become tasks, on each forge the fake speaks (GitHub, GitLab, Gitea): a
labelled issue is imported once whether its webhook or the poll (or both) tell of it; its
run's pull request says "Closes #N", so merging it on the forge closes the issue there; an
edit follows into a task not started; closing cancels work not started and leaves a run at
work; an issue neither labelled nor assigned to AutoCoder stays on the forge; a forge down
during the poll loses nothing."""

from __future__ import annotations

import pytest

from pipelines.forge_issues.services import (
    CLOSED_QUEUED,
    CLOSED_WHILE_WORKING,
    EDITED_AFTER_START,
    forge_issues_poll,
)
from pipelines.models import ForgeIssue, RunStatus
from pipelines.pull_requests.poll import pull_requests_poll
from pipelines.pull_requests.services import run_open_pull_request
from pipelines.review.services import run_approve
from pipelines.runs.services import run_start
from pipelines.tasks import pipeline_close_forge_issue
from pipelines.tests.forge_issues.conftest import LABEL, set_forge
from pipelines.tests.pull_requests.test_pull_requests import awaiting_run
from repos.models import Repository
from tasks.models import Task

pytestmark = pytest.mark.django_db

KINDS = ["github", "gitlab", "gitea"]
FORGE_NAMES = {"github": "GitHub", "gitlab": "GitLab", "gitea": "Gitea / Forgejo"}


def poll() -> int:
    return forge_issues_poll(older_than_seconds=0)


@pytest.mark.parametrize("kind", KINDS)
def test_a_labelled_issue_becomes_one_task_whose_merged_pull_request_closes_it(
    fake_llm, forge, linked, remote, owner, owner_client, client, person_for, kind
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    person = person_for(repository, kind)
    number = person.change(title="Make add add", body="add(2, 3) should be <b>5</b>", labels=[LABEL, "bug"])
    assert person.outcome == "applied"
    task = Task.objects.get(project=repository.project)
    assert (task.title, task.description, task.status) == ("Make add add", "add(2, 3) should be <b>5</b>", "backlog")
    issue = ForgeIssue.objects.get()
    assert (issue.number, issue.task_id, issue.state) == (number, task.pk, "open")
    # The poll finds the same issue, and the same delivery comes again: still one task.
    assert poll() == 1
    assert person.post(*person.last) == "replayed"
    assert Task.objects.filter(project=repository.project).count() == 1 and ForgeIssue.objects.count() == 1

    # The card and the API link the issue; its body is shown as text.
    client.force_login(owner)
    card = client.get(f"/tasks/{task.pk}/card").content.decode()
    assert f"#{number} on {FORGE_NAMES[kind]}" in card
    assert issue.url in card
    page = client.get(f"/tasks/{task.pk}").content.decode()
    assert "&lt;b&gt;5&lt;/b&gt;" in page and "<b>5</b>" not in page
    api = owner_client.get(f"/api/tasks/{task.pk}").json()
    assert api["forge_issue"] == {"number": number, "url": issue.url, "state": "open"}

    # A run, its pull request saying "Closes #N", merged on the forge: the forge closes the
    # issue, the task is Done, and the issue's state follows without touching the task.
    run = awaiting_run(fake_llm, task, owner)
    pull_request = run_open_pull_request(run=run, actor=owner)
    fake_pull = forge.repositories["team/calc"].pulls[pull_request.number]
    assert f"Closes #{number}" in fake_pull.body
    forge.set_state("team/calc", pull_request.number, "merged")
    assert forge.repositories["team/calc"].issues[number].state == "closed"
    pull_requests_poll(older_than_seconds=0)
    task.refresh_from_db()
    assert task.status == "done"
    poll()
    issue.refresh_from_db()
    task.refresh_from_db()
    assert issue.state == "closed" and task.status == "done" and issue.note == ""
    assert owner_client.get(f"/api/tasks/{task.pk}").json()["forge_issue"]["state"] == "closed"
    assert "· closed" in client.get(f"/tasks/{task.pk}/card").content.decode()
    # AutoCoder closed nothing itself: the forge did.
    assert forge.repositories["team/calc"].issues[number].comments == []


@pytest.mark.parametrize("kind", KINDS)
def test_an_edited_issue_updates_the_task_until_work_starts(
    fake_llm, forge, linked, remote, owner, client, person_for, kind
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    person = person_for(repository, kind)
    number = person.change(title="Add is wrong", body="first words", labels=[LABEL])
    task = Task.objects.get(project=repository.project)
    person.change(number=number, title="Make add add", body="add(2, 3) should be 5")
    assert person.outcome == "applied"
    task.refresh_from_db()
    assert (task.title, task.description) == ("Make add add", "add(2, 3) should be 5")

    if kind != "github":
        return  # the run below costs a whole pipeline: once is enough for what follows
    run = awaiting_run(fake_llm, task, owner)
    person.change(number=number, title="Make add multiply", body="changed my mind")
    task.refresh_from_db()
    run.refresh_from_db()
    assert (task.title, task.description) == ("Make add add", "add(2, 3) should be 5")
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert ForgeIssue.objects.get().note == EDITED_AFTER_START
    client.force_login(owner)
    assert "Edited on the forge after work started" in client.get(f"/tasks/{task.pk}").content.decode()


@pytest.mark.parametrize("kind", KINDS)
def test_a_closed_issue_cancels_queued_work_and_leaves_a_run_at_work(
    fake_llm, forge, linked, remote, owner, client, person_for, kind
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    person = person_for(repository, kind)
    waiting = person.change(title="Not started yet", body="", labels=[LABEL])
    task = Task.objects.get(forge_issue__number=waiting)
    queued = run_start(task=task, user=owner)
    assert queued.status == RunStatus.QUEUED
    # Closed on the forge; the poll finds it (no webhook).
    person.change(number=waiting, state="closed", deliver=False)
    assert poll() == 1
    queued.refresh_from_db()
    task.refresh_from_db()
    issue = ForgeIssue.objects.get(number=waiting)
    assert queued.status == RunStatus.CANCELLED and task.status == "backlog"
    assert (issue.state, issue.note) == ("closed", CLOSED_QUEUED)
    assert task.pipeline_state["forge_issue"]["state"] == "closed"

    if kind != "gitlab":
        return  # the run at work below costs a whole pipeline: once is enough
    working = person.change(title="Make add add", body="add(2, 3) should be 5", labels=[LABEL])
    task = Task.objects.get(forge_issue__number=working)
    run = awaiting_run(fake_llm, task, owner)
    person.change(number=working, state="closed")
    assert person.outcome == "applied"
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert ForgeIssue.objects.get(number=working).note == CLOSED_WHILE_WORKING
    client.force_login(owner)
    assert "the run was left" in client.get(f"/tasks/{task.pk}").content.decode()


@pytest.mark.parametrize("kind", KINDS)
def test_an_issue_neither_labelled_nor_assigned_to_autocoder_stays_on_the_forge(
    forge, linked, remote, owner, person_for, kind
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    person = person_for(repository, kind)
    person.change(title="Someone's idea", body="", labels=["question"], assignee="someone")
    assert person.outcome == "ignored"
    poll()
    assert not Task.objects.filter(project=repository.project).exists()

    # Assigned to the token's account (the fake's login for it): taken, by webhook and poll.
    forge.logins[next(iter(forge.tokens))] = "the-bot"
    repository = set_forge(linked, forge, remote, kind, owner, forge_issue_label="", forge_issue_assigned=True)
    person = person_for(repository, kind)
    person.change(title="For the bot", body="", assignee="the-bot")
    assert person.outcome == "applied"
    person.change(title="For someone else", body="", labels=[LABEL], assignee="someone")
    assert person.outcome == "ignored"  # the label is no longer what is taken
    poll()
    assert list(Task.objects.filter(project=repository.project).values_list("title", flat=True)) == ["For the bot"]
    assert Repository.objects.get(pk=repository.pk).forge_login == "the-bot"


@pytest.mark.parametrize("kind", KINDS)
def test_a_forge_down_during_the_poll_loses_nothing(forge, linked, remote, owner, person_for, kind) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    person = person_for(repository, kind)
    first = person.change(title="First", body="", labels=[LABEL], deliver=False)
    assert poll() == 1
    since = Repository.objects.get(pk=repository.pk).forge_issues_since
    assert since
    second = person.change(title="Second", body="", labels=[LABEL], deliver=False)
    forge.fail_next = [503]
    poll()
    repository.refresh_from_db()
    assert "Try again later" in repository.forge_issues_error and repository.forge_issues_since == since
    assert list(ForgeIssue.objects.values_list("number", flat=True)) == [first]
    forge.unreachable = True
    poll()
    forge.unreachable = False
    assert ForgeIssue.objects.count() == 1
    poll()
    repository.refresh_from_db()
    assert sorted(ForgeIssue.objects.values_list("number", flat=True)) == [first, second]
    assert repository.forge_issues_error == "" and Task.objects.filter(project=repository.project).count() == 2


@pytest.mark.parametrize("kind", KINDS)
def test_merged_here_the_issue_is_closed_from_here_naming_the_commit(
    fake_llm, forge, linked, remote, owner, person_for, kind
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    person = person_for(repository, kind)
    number = person.change(title="Make add add", body="add(2, 3) should be 5", labels=[LABEL])
    task = Task.objects.get(forge_issue__number=number)
    run = awaiting_run(fake_llm, task, owner)
    run = run_approve(run=run, actor=owner)
    commit = run.merge_result["commit"]
    assert commit and ForgeIssue.objects.get().close_commit == commit
    # The forge is down when the job runs: still to do, said; the poll does it later.
    forge.fail_next = [502]
    pipeline_close_forge_issue(task.pk)
    issue = ForgeIssue.objects.get()
    assert issue.close_commit == commit and "Try again later" in issue.error
    assert forge.repositories["team/calc"].issues[number].state == "open"
    poll()
    fake_issue = forge.repositories["team/calc"].issues[number]
    issue.refresh_from_db()
    assert fake_issue.state == "closed" and issue.state == "closed" and issue.close_commit == ""
    assert len(fake_issue.comments) == 1 and commit[:12] in fake_issue.comments[0]
    assert f"/commit/{commit}" in fake_issue.comments[0]
    poll()  # closed once: no second comment
    assert len(forge.repositories["team/calc"].issues[number].comments) == 1
