"""Live event payloads are typed: a wrong field or type is refused where the event is
built; the phase-change event carries the server's label and agent, so the task page
keeps no table of its own (static/js/task_live.js)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.db import transaction

from core.payloads import PayloadTypeError
from pipelines.events import (
    EVENT_CLASSES,
    AgentLog,
    EventType,
    PhaseChange,
    RunError,
    RunUpdate,
    event_publish,
)
from pipelines.models import PipelineRun, RunEvent, RunStatus
from pipelines.runs.selectors import AGENT_FOR_PHASE, phase_label, run_phase_change_event
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

TASK_LIVE_JS = Path(settings.BASE_DIR) / "static" / "js" / "task_live.js"


def phase_change(**changes: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "phase": "coding",
        "status": "coding",
        "iteration": 0,
        "run_id": 1,
        "task_id": 2,
        "label": "Coding",
        "agent": "coder",
    }
    return {**fields, **changes}


def test_every_event_type_has_one_class() -> None:
    assert set(EVENT_CLASSES) == set(EventType)


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        AgentLog(agent="coder", chunk="x", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'extra'"):
        PhaseChange(**phase_change(extra=1))  # type: ignore[arg-type]


def test_a_missing_field_is_refused() -> None:
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'chunk'"):
        AgentLog(agent="coder")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("cls", "fields"),
    [
        (AgentLog, {"agent": "coder", "chunk": b"bytes"}),
        (PhaseChange, phase_change(iteration="1")),
        (PhaseChange, phase_change(iteration=True)),  # JSON tells a bool from a number
        (PhaseChange, phase_change(run_id=None)),
        (RunError, {"type": "failed", "message": "boom", "retryable": 0}),
        (RunUpdate, {"run_id": 1, "task_id": 2, "input_tokens": 1, "output_tokens": 2, "cost_usd": 0.5}),
    ],
)
def test_a_wrong_type_is_refused(cls: type, fields: dict[str, object]) -> None:
    with pytest.raises(PayloadTypeError):
        cls(**fields)


def test_an_event_is_frozen() -> None:
    event = AgentLog(agent="coder", chunk="x")
    with pytest.raises(AttributeError):
        event.chunk = "y"  # type: ignore[misc]


@pytest.mark.parametrize("status", RunStatus.values)
def test_the_phase_change_carries_the_label_of_phase_label(project, status: str) -> None:
    task = TaskFactory(project=project)
    for iteration in (0, 2):
        run = PipelineRun(task=task, number=1, status=status, phase=status, iteration=iteration)
        run.pk = 7
        event = run_phase_change_event(run=run)
        assert event.label == phase_label(status, iteration)
        assert event.agent == AGENT_FOR_PHASE.get(status, "")
    # From the second run on, the label says which run.
    run = PipelineRun(task=task, number=3, status=status, phase=status, iteration=1)
    run.pk = 8
    assert run_phase_change_event(run=run).label == f"Run 3 · {phase_label(status, 1)}"


def test_labels_the_page_once_drifted_on() -> None:
    assert phase_label(RunStatus.VERIFYING, 0) == "Verifying"
    assert phase_label(RunStatus.PREPARING, 0) == "Preparing environment"
    assert phase_label(RunStatus.REVIEWING, 1) == "Review 2"
    assert phase_label(RunStatus.FIXING, 1, run_number=2) == "Run 2 · Fixing after review 1"


def test_the_task_page_script_keeps_no_phase_table() -> None:
    script = TASK_LIVE_JS.read_text()
    for rule in ("PHASE_LABELS", "AGENT_FOR_STATUS", '"Preparing', "Fixing after review"):
        assert rule not in script


def test_published_data_is_the_event_and_a_timestamp(project, django_capture_on_commit_callbacks) -> None:
    task = TaskFactory(project=project)
    with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
        stored = event_publish(task=task, run=None, event=RunError(type="paused", message="m", retryable=True))
    assert len(callbacks) == 1
    row = RunEvent.objects.get(pk=stored.pk)
    assert row.type == "error"
    timestamp = row.data.pop("timestamp")
    assert isinstance(timestamp, str) and timestamp
    assert row.data == {"type": "paused", "message": "m", "retryable": True}
