"""An agent's live log: its streamed chunks coalesced into ``agent-log`` events, written
off the thread that reads the model's stream.

A streaming agent hands over ~50 chunks a second. Written by that thread, every window's
text cost it an event (a JSON payload, a RunEvent INSERT and commit, a hop to the channel
layer's loop and a Redis publish) of the process's one core: with 20 runs streaming in one
worker process the tokens reached the page 0.3 s late, nearly all of it spent waiting for
that core (bench/bench_concurrency.py, bench/RESULTS.md).

So, by default (``PIPELINE_LOG_FLUSHER``), ``write`` only appends to the stream's buffer,
and one flusher thread per process, PIPELINE_LOG_FLUSH_SECONDS after the first chunk
waiting, writes every waiting stream's text at once: one stored event per stream per
flush, all in one INSERT and one transaction, sent in one hop to the channel layer
(``events_publish_many``). A chunk waits at most the window plus that flush, whatever
the model's pace (a write-driven flush waits for the next chunk after the window).

``flush`` writes what is waiting at once, on the caller's thread: at the end of a reply,
before an event that must be stored after the text. A stream's text is written under its
own lock, by the flusher or by its owner, so its events are stored in the order the text
came. When the flusher cannot write (the database went away), the text goes back to the
front of the buffer: the owner's next ``write`` queues it again, its ``flush`` writes it
or raises. Without the flusher (the test settings), ``write`` flushes on the owner's
thread once the window has passed, as before.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection, connections

from pipelines.events import AgentLog, event_publish, events_publish_many

if TYPE_CHECKING:
    from pipelines.models import PipelineRun
    from tasks.models import Task

logger = logging.getLogger(__name__)


class AgentLogStream:
    """Coalesces an agent's token chunks into at most one ``agent-log`` event per
    PIPELINE_LOG_FLUSH_SECONDS (see the module's docstring)."""

    def __init__(self, *, task: Task, run: PipelineRun, agent: str) -> None:
        self.task = task
        self.run = run
        self.agent = agent
        self._buffer: list[str] = []
        # Guards the buffer (held for an append or a take, never across I/O) ...
        self._buffer_lock = threading.Lock()
        # ... and serializes this stream's writes, so that its events keep their order.
        self._write_lock = threading.Lock()
        # In the flusher's queue already (set by write, cleared as the flusher takes it).
        self._queued = False
        self._last_flush = 0.0
        self._interval = settings.PIPELINE_LOG_FLUSH_SECONDS
        self._flusher = process_flusher() if settings.PIPELINE_LOG_FLUSHER else None

    def write(self, chunk: str) -> None:
        if not chunk:
            return
        with self._buffer_lock:
            self._buffer.append(chunk)
            queue = self._flusher is not None and not self._queued
            if queue:
                self._queued = True
        if self._flusher is not None:
            if queue:
                self._flusher.queue(self)
        elif time.monotonic() - self._last_flush >= self._interval:
            self.flush()

    def flush(self) -> None:
        """Write what is waiting now, on this thread (after a write by the flusher that
        is under way: the text it took is stored first)."""
        with self._write_lock:
            chunk = self._take()
            if chunk:
                event_publish(task=self.task, run=self.run, event=AgentLog(agent=self.agent, chunk=chunk))

    def discard(self) -> None:
        """Drop what is waiting, unwritten: the phase is no longer this worker's (its
        lease ran out), and nothing more may be written for it."""
        with self._write_lock:
            self._take()

    def _take(self) -> str:
        with self._buffer_lock:
            chunk = "".join(self._buffer)
            self._buffer.clear()
            self._queued = False
            self._last_flush = time.monotonic()
        return chunk

    def _give_back(self, chunk: str) -> None:
        with self._buffer_lock:
            self._buffer.insert(0, chunk)


class LogFlusher:
    """The process's flusher thread: ``queue`` a stream that has text waiting; the text
    of every queued stream is written together ``interval`` seconds after the first."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        # Insertion-ordered: streams are written in the order their text began waiting.
        self._waiting: dict[AgentLogStream, None] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-log-flusher", daemon=True)
        self._thread.start()

    def queue(self, stream: AgentLogStream) -> None:
        with self._lock:
            self._waiting[stream] = None
        self._wake.set()

    def stop(self) -> None:
        """End the thread (after the flush under way) and close its database connection."""
        self._stopping.set()
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            # The window: chunks arriving meanwhile, from every stream, go in this flush.
            if self._stopping.wait(self.interval):
                connections.close_all()
                return
            try:
                self.flush_waiting()
            except Exception:  # the thread must live on; flush() logged what it could not write
                logger.exception("The agent-log flusher failed")

    def flush_waiting(self) -> None:
        """Write the text of every stream queued so far."""
        with self._lock:
            streams = list(self._waiting)
            self._waiting.clear()
            self._wake.clear()
        self.flush(streams)

    def flush(self, streams: list[AgentLogStream]) -> None:
        """Write the waiting text of ``streams``: one event each, one INSERT for all."""
        taken: list[tuple[AgentLogStream, str]] = []
        for stream in streams:
            if not stream._write_lock.acquire(blocking=False):
                # Its owner is flushing it right now, and takes what waits with it.
                with stream._buffer_lock:
                    stream._queued = False
                continue
            chunk = stream._take()
            if chunk:
                taken.append((stream, chunk))
            else:
                stream._write_lock.release()
        if not taken:
            return
        try:
            events_publish_many(
                [(stream.task, stream.run, AgentLog(agent=stream.agent, chunk=chunk)) for stream, chunk in taken]
            )
        except Exception as exc:  # noqa: BLE001 - whatever the write raised, the text must wait
            # Nothing is lost: the text waits at the front of its buffer for the owner's
            # next write or flush (which raises if the database is still away).
            for stream, chunk in taken:
                stream._give_back(chunk)
            logger.warning("Could not write %d agent logs, left to their agents: %s", len(taken), exc)
            # A dropped connection stays broken in this thread until closed (the flusher's
            # thread is in no transaction; a caller's is left to the caller).
            if not connection.in_atomic_block:
                connection.close()
        finally:
            for stream, _ in taken:
                stream._write_lock.release()


_flusher: LogFlusher | None = None
_flusher_pid = 0
_flusher_lock = threading.Lock()


def process_flusher() -> LogFlusher:
    """This process's flusher, started on first use (again in a forked child, which
    inherits the object but not its thread)."""
    global _flusher, _flusher_pid
    with _flusher_lock:
        if _flusher is None or _flusher_pid != os.getpid():
            _flusher = LogFlusher(settings.PIPELINE_LOG_FLUSH_SECONDS)
            _flusher_pid = os.getpid()
        return _flusher
