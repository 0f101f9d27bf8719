"""Faults at the edges of a run: the queue refusing work."""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError

from pipelines.models import PipelineRun, RunEvent, RunTransition
from pipelines.runs import services
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_start_while_the_broker_is_down_is_503_and_leaves_no_run(owner_client, project, settings, monkeypatch) -> None:
    settings.ANTHROPIC_API_KEY = "sk-test"
    task = TaskFactory(project=project)

    def broker_down(run_id: int) -> None:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(services, "_enqueue_advance", broker_down)
    response = owner_client.post(f"/api/tasks/{task.pk}/start-pipeline")
    assert response.status_code == 503
    assert response.json() == {"message": services.BROKER_DOWN, "code": "queue_unavailable", "extra": {}}
    assert not PipelineRun.objects.exists()
    assert not RunTransition.objects.exists()
    assert not RunEvent.objects.exists()
    task.refresh_from_db()
    assert task.pipeline_state == {}

    # Once the queue is back, the same start works.
    monkeypatch.undo()
    assert owner_client.post(f"/api/tasks/{task.pk}/start-pipeline").status_code == 202


def test_a_phase_that_cannot_be_queued_keeps_its_transition_and_says_the_sweeper_will_queue_it(
    owner, project, settings, monkeypatch, caplog, django_capture_on_commit_callbacks
) -> None:
    settings.ANTHROPIC_API_KEY = "sk-test"
    task = TaskFactory(project=project)
    run = services.run_start(task=task, user=owner)

    def broker_down(run_id: int) -> None:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(services, "_enqueue_advance", broker_down)
    run = services.run_transition(run=run, to_status="planning", enqueue=False)
    with django_capture_on_commit_callbacks(execute=True):
        services.run_transition(run=run, to_status="coding", fields={"plan": [{"id": "s1"}]})

    run.refresh_from_db()
    assert run.status == "coding" and run.plan == [{"id": "s1"}]
    assert f"Run {run.pk}: could not queue its coding phase (Error 111" in caplog.text
    assert "the sweeper queues it again" in caplog.text
