"""Faults at the edges of a run: the queue refusing work."""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError

from pipelines import services
from pipelines.models import PipelineRun, RunEvent, RunTransition
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
