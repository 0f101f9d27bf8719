"""An agent's live log (pipelines/agent_log.py): with the flusher, a stream's write only
buffers; one flush writes one event per waiting stream, all in one INSERT, sent on
commit; text that could not be written waits for its agent; nothing is lost or reordered."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from core import live
from pipelines import agent_log
from pipelines.agent_log import AgentLogStream, LogFlusher
from pipelines.models import PipelineRun, RunEvent
from tests.factories import TaskFactory


def stored_logs(run: PipelineRun) -> list[str]:
    return list(RunEvent.objects.filter(run=run, type="agent-log").order_by("id").values_list("data__chunk", flat=True))


def new_run() -> PipelineRun:
    return PipelineRun.objects.create(task=TaskFactory(), number=1)


@pytest.fixture
def flusher(settings, monkeypatch) -> Iterator[LogFlusher]:
    """The process's flusher, one of the test's own. Its window is long: a test that
    wants a flush calls ``flush_waiting`` itself, unless it sets the window."""
    settings.PIPELINE_LOG_FLUSHER = True
    own = LogFlusher(interval=3600)
    monkeypatch.setattr(agent_log, "process_flusher", lambda: own)
    yield own
    own.stop()


@pytest.fixture
def sent(monkeypatch) -> list[list[tuple[str, dict[str, Any]]]]:
    """What reaches the channel layer: the (group, message) pairs of each hand-over."""
    handovers: list[list[tuple[str, dict[str, Any]]]] = []

    def group_send_many(sends: list[tuple[str, dict[str, Any]]], timeout: float = 5.0) -> list[None]:
        handovers.append(list(sends))
        return [None] * len(sends)

    monkeypatch.setattr(live, "group_send_many", group_send_many)
    return handovers


@pytest.mark.django_db
def test_one_flush_stores_one_event_per_waiting_stream_in_one_insert_and_sends_them_on_commit(
    flusher: LogFlusher, sent: list[list[tuple[str, dict[str, Any]]]], django_capture_on_commit_callbacks
) -> None:
    runs = [new_run() for _ in range(3)]
    streams = [AgentLogStream(task=run.task, run=run, agent="planner") for run in runs]
    for number, stream in enumerate(streams):
        for token in ("a", "b", "c"):
            stream.write(f"{token}{number} ")
    assert [stored_logs(run) for run in runs] == [[], [], []], "a write only buffers"

    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks(execute=True):
        flusher.flush_waiting()

    inserts = [query["sql"] for query in queries if query["sql"].startswith('INSERT INTO "pipelines_runevent"')]
    assert len(inserts) == 1, inserts
    assert [stored_logs(run) for run in runs] == [["a0 b0 c0 "], ["a1 b1 c1 "], ["a2 b2 c2 "]]
    events = RunEvent.objects.filter(run__in=runs).order_by("id")
    # One hand-over to the channel layer for the three, each to its task's group.
    assert [[(group, message["event"]["id"]) for group, message in sends] for sends in sent] == [
        [(f"task-{event.task_id}", event.pk) for event in events]
    ]

    # Nothing waits now: another flush writes nothing; a new write is queued again.
    flusher.flush_waiting()
    assert sum(len(stored_logs(run)) for run in runs) == 3
    streams[1].write("d1")
    flusher.flush_waiting()
    assert stored_logs(runs[1]) == ["a1 b1 c1 ", "d1"]


@pytest.mark.django_db
def test_text_the_flusher_could_not_write_waits_for_its_agent_and_nothing_is_lost(
    flusher: LogFlusher, monkeypatch
) -> None:
    run = new_run()
    stream = AgentLogStream(task=run.task, run=run, agent="coder")
    stream.write("one ")
    stream.write("two ")

    def database_away(items: object) -> None:
        raise DatabaseError("the connection dropped")

    with monkeypatch.context() as patched:
        patched.setattr(agent_log, "events_publish_many", database_away)
        flusher.flush_waiting()
    assert stored_logs(run) == []

    # The next write queues the stream again; the agent's own flush writes it all, in order.
    stream.write("three")
    assert stream in flusher._waiting
    stream.flush()
    assert stored_logs(run) == ["one two three"]
    flusher.flush_waiting()
    assert stored_logs(run) == ["one two three"], "nothing written twice"


@pytest.mark.django_db
def test_a_stream_its_agent_is_flushing_is_left_to_the_agent(flusher: LogFlusher) -> None:
    run = new_run()
    stream = AgentLogStream(task=run.task, run=run, agent="coder")
    stream.write("mine")
    with stream._write_lock:  # the agent's flush under way
        flusher.flush_waiting()
    assert stored_logs(run) == []
    stream.flush()
    assert stored_logs(run) == ["mine"]


@pytest.mark.django_db(transaction=True)
def test_the_flusher_thread_writes_every_streams_text_coalesced_and_in_order(flusher: LogFlusher) -> None:
    flusher.interval = 0.02
    runs = [new_run() for _ in range(3)]
    chunks = [f"<{n}>" for n in range(60)]

    def agent(run: PipelineRun) -> None:
        stream = AgentLogStream(task=run.task, run=run, agent="planner")
        for chunk in chunks:
            stream.write(chunk)
            time.sleep(0.002)

    writers = [threading.Thread(target=agent, args=(run,)) for run in runs]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    # No flush by the agents: the flusher's thread writes what they left.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any("".join(stored_logs(run)) != "".join(chunks) for run in runs):
        time.sleep(0.05)
    for run in runs:
        logs = stored_logs(run)
        assert "".join(logs) == "".join(chunks)
        assert 1 <= len(logs) < len(chunks), "coalesced"


@pytest.mark.django_db
def test_text_of_a_phase_that_is_no_longer_the_workers_is_discarded(flusher: LogFlusher) -> None:
    run = new_run()
    stream = AgentLogStream(task=run.task, run=run, agent="coder")
    stream.write("streamed before the lease ran out")
    stream.discard()
    flusher.flush_waiting()
    stream.flush()
    assert stored_logs(run) == []
