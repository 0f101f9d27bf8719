"""Django admin: runs with their history, and the cancel / retry actions."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import User
from pipelines.events import AgentLog, event_publish
from pipelines.models import PipelineRun, RunStatus
from pipelines.runs.services import run_start
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client: Client) -> Client:
    client.force_login(User.objects.create_superuser(email="root@example.com", password="root password"))
    return client


@pytest.fixture
def run(project, owner, settings) -> PipelineRun:
    settings.ANTHROPIC_API_KEY = "sk-test"
    run = run_start(task=TaskFactory(project=project, title="Fix the thing"), user=owner, api_key="sk-user-secret-key")
    event_publish(task=run.task, run=run, event=AgentLog(agent="planner", chunk="hello"))
    return run


def test_run_pages_show_history_and_never_the_key(operator: Client, run: PipelineRun) -> None:
    changelist = operator.get(reverse("admin:pipelines_pipelinerun_changelist"))
    assert changelist.status_code == 200
    assert "Fix the thing" in changelist.content.decode()
    change = operator.get(reverse("admin:pipelines_pipelinerun_change", args=[run.pk]))
    html = change.content.decode()
    assert change.status_code == 200
    assert "hello" in html  # the persisted events
    assert "started" in html  # the audit row of the start
    assert "sk-user-secret-key" not in html
    assert run.api_key_encrypted not in html


def test_cancel_and_retry_actions(operator: Client, run: PipelineRun) -> None:
    url = reverse("admin:pipelines_pipelinerun_changelist")
    operator.post(url, {"action": "cancel_runs", "_selected_action": [run.pk]})
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    operator.post(url, {"action": "retry_runs", "_selected_action": [run.pk]})
    assert PipelineRun.objects.filter(task=run.task).count() == 2
    assert PipelineRun.objects.get(task=run.task, number=2).status == RunStatus.QUEUED
    # Cancelling a finished run is refused with a message, not an error page.
    response = operator.post(url, {"action": "cancel_runs", "_selected_action": [run.pk]}, follow=True)
    assert response.status_code == 200
    assert "cannot be cancelled" in response.content.decode()


def test_non_staff_is_sent_to_the_admin_login(client: Client, owner: User, run: PipelineRun) -> None:
    client.force_login(owner)
    response = client.get(reverse("admin:pipelines_pipelinerun_changelist"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
