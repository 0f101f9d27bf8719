"""The production worker's thread pool, end to end: real ``celery worker`` processes
started with the Procfile's command (``--pool=threads``, sized by ``WORKER_THREADS``)
against PostgreSQL and Redis, the LLM the fake Anthropic server of this process.

- One worker process runs more phases at once than a prefork worker has children: six
  planners wait on the model together in one process with no child processes, and a warm
  shutdown (SIGTERM) hands every one of them back to the sweeper.
- Two worker processes keep the limits on runs at once (pipelines/runs/places.py): runs over
  the user's or the project's limit wait queued whichever worker takes their job, and a
  waiting run starts when a run ends.

Each run's planner call is held by the fake server until the test opens that run's gate,
so the test looks at runs mid-phase without racing them.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings

from accounts.models import User
from config.celery import app
from deploy.supervise import ROOT, read_procfile
from deploy.workers import worker_commands
from llm.demo.model import DemoReply, MessagesRequest
from pipelines.models import WORKING_STATUSES, PipelineRun, RunStatus
from pipelines.runs.leases import runs_sweep
from pipelines.runs.services import run_start
from projects.models import Project
from tests.factories import ProjectFactory, TaskFactory, UserFactory
from tests.fake_anthropic import FakeAnthropicServer, default_reply
from tests.processes import descendants, stack_env
from tests.workers import delete_queue, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(settings.REDIS_URL is None, reason="REDIS_URL is unset"),
]

GATE = re.compile(r"\[gate (\w+)\]")
PLANNER_TOOL = "submit_plan"
SETTLED = 90  # seconds a step may take on a loaded machine before the test gives up


class PlannerGates:
    """The fake model's answers: each run's planner call waits until its gate opens (the
    task's description names the gate); everything else answers as the demo model."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Event] = {}
        self._waiting: set[str] = set()

    def _gate(self, name: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def reply(self, request: MessagesRequest) -> DemoReply:
        match = GATE.search(request.prompt_text)
        if request.answer_tool == PLANNER_TOOL and match:
            name = match.group(1)
            gate = self._gate(name)
            with self._lock:
                self._waiting.add(name)
            try:
                gate.wait(SETTLED)
            finally:
                with self._lock:
                    self._waiting.discard(name)
        return default_reply(request)

    def waiting(self) -> set[str]:
        """The runs whose planner is waiting on the model right now."""
        with self._lock:
            return set(self._waiting)

    def open(self, *names: str) -> None:
        for name in names:
            self._gate(name).set()

    def open_all(self) -> None:
        with self._lock:
            gates = list(self._gates.values())
        for gate in gates:
            gate.set()


@pytest.fixture
def gates(fake_llm: FakeAnthropicServer) -> Iterator[PlannerGates]:
    planner_gates = PlannerGates()
    fake_llm.fallback = planner_gates.reply
    try:
        yield planner_gates
    finally:
        planner_gates.open_all()  # nothing is left waiting on the test


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue of the test's own: the jobs this process queues go there, and only the
    test's workers consume it (another worker on the shared Redis must not)."""
    name = f"autocoder-threads-{uuid.uuid4().hex[:10]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = name
    try:
        yield name
    finally:
        app.conf.task_default_queue = previous
        delete_queue(name)


class Workers:
    """``celery worker`` processes with the Procfile's command and production settings."""

    def __init__(self, *, queue: str, llm_url: str, workdir: Path, **env: str) -> None:
        assert settings.REDIS_URL is not None
        self.env = stack_env(port=0, redis_url=settings.REDIS_URL, queue=queue, llm_url=llm_url, workdir=workdir, **env)
        self.queue = queue
        self.workdir = workdir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, threads: int) -> subprocess.Popen[bytes]:
        launcher = shlex.split(read_procfile(ROOT / "Procfile")["worker"])
        assert launcher[:2] == ["python", "deploy/workers.py"], launcher
        number = len(self.processes)
        # One process of the launcher's (it would start WORKER_PROCESSES of them).
        (command,) = worker_commands(1, [*launcher[2:], "-Q", self.queue, "-n", f"{self.queue}-{number}@%h"])
        command += ["--without-heartbeat", "--without-mingle", "--without-gossip"]
        with self.log(number).open("ab") as out:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**self.env, "WORKER_THREADS": str(threads)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        wait_until(lambda: "ready." in self.log_text(number), timeout=SETTLED, why=self.logs)
        return process

    def log(self, number: int) -> Path:
        return self.workdir / f"worker-{number}.log"

    def log_text(self, number: int) -> str:
        path = self.log(number)
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- worker {n}:\n{self.log_text(n)[-4000:]}" for n in range(len(self.processes)))

    def jobs_done(self) -> int:
        """``pipeline_advance`` jobs finished, over all the workers."""
        return sum(
            len(re.findall(r"pipelines\.tasks\.pipeline_advance\[[^\]]+\] succeeded", self.log_text(n)))
            for n in range(len(self.processes))
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)


@contextmanager
def workers(queue: str, fake_llm: FakeAnthropicServer, tmp_path: Path, **env: str) -> Iterator[Workers]:
    started = Workers(queue=queue, llm_url=fake_llm.url, workdir=tmp_path, **env)
    try:
        yield started
    finally:
        started.stop()


def start_run(owner: User, project: Project, gate: str) -> PipelineRun:
    task = TaskFactory(project=project, title=f"Task {gate}", description=f"Do it. [gate {gate}]")
    return run_start(task=task, user=owner)


def statuses(runs: dict[str, PipelineRun]) -> dict[str, str]:
    found = dict(PipelineRun.objects.filter(pk__in=[run.pk for run in runs.values()]).values_list("pk", "status"))
    return {name: found[run.pk] for name, run in runs.items()}


def working(runs: dict[str, PipelineRun]) -> set[str]:
    return {name for name, status in statuses(runs).items() if status in WORKING_STATUSES}


def test_one_worker_process_runs_six_phases_at_once_on_threads_and_hands_them_all_back_on_sigterm(
    fake_llm: FakeAnthropicServer, gates: PlannerGates, queue: str, tmp_path: Path
) -> None:
    owner = UserFactory()
    project = ProjectFactory(owner=owner, runs_at_once=6)
    names = [f"r{n}" for n in range(6)]
    with workers(queue, fake_llm, tmp_path, RUNS_AT_ONCE_PER_USER="6") as started:
        worker = started.start(threads=8)
        runs = {name: start_run(owner, project, name) for name in names}

        # All six planners wait on the model at the same moment, in one process that
        # has no children: six threads of it, where a prefork --concurrency=2 had two.
        wait_until(lambda: gates.waiting() == set(names), timeout=SETTLED, why=lambda: f"{gates.waiting()}")
        assert statuses(runs) == dict.fromkeys(names, RunStatus.PLANNING)
        assert descendants(worker.pid) == set(), "the phases run on threads, not child processes"
        leases = PipelineRun.objects.filter(pk__in=[run.pk for run in runs.values()]).values_list(
            "lease_owner", flat=True
        )
        assert len(set(leases)) == 6 and "" not in set(leases), "each phase holds its own lease"

        # A warm shutdown: every running phase sees the process's stop flag and gives
        # its phase back for the sweeper, and the worker exits without being killed.
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(SETTLED) == 0, started.logs()
        handed_on = PipelineRun.objects.filter(pk__in=[run.pk for run in runs.values()])
        assert {(run.status, run.lease_owner) for run in handed_on} == {(RunStatus.PLANNING, "")}
        assert all(run.lease_expires_at is not None for run in handed_on), "left for the sweeper at once"

        # Another worker takes them over once the sweeper (beat's loop; here one sweep)
        # queues them again, and all six finish.
        gates.open_all()
        started.start(threads=8)
        assert sorted(runs_sweep()) == sorted(run.pk for run in runs.values())
        wait_until(
            lambda: set(statuses(runs).values()) == {RunStatus.AWAITING_APPROVAL},
            timeout=SETTLED,
            why=lambda: f"{statuses(runs)}\n{started.logs()}",
        )


def test_two_worker_processes_keep_the_limits_on_runs_at_once_and_start_a_waiting_run_when_one_ends(
    fake_llm: FakeAnthropicServer, gates: PlannerGates, queue: str, tmp_path: Path, settings
) -> None:
    """The owner may run 3 at once, project A 2. Started oldest first: a1, a2, b1, a3, b2.
    a1, a2 and b1 work; a3 waits for its project (and the owner), b2 for the owner."""
    settings.RUNS_AT_ONCE_PER_USER = 3
    owner = UserFactory()
    project_a = ProjectFactory(owner=owner, runs_at_once=2)
    project_b = ProjectFactory(owner=owner, runs_at_once=5)
    with workers(queue, fake_llm, tmp_path, RUNS_AT_ONCE_PER_USER="3") as started:
        # Two threads each: the three runs that work need both processes.
        started.start(threads=2)
        started.start(threads=2)
        runs = {}
        for name, project in (("a1", project_a), ("a2", project_a), ("b1", project_b), ("a3", project_a)):
            runs[name] = start_run(owner, project, name)
        runs["b2"] = start_run(owner, project_b, "b2")

        # Every job has been taken: three phases wait on the model, two jobs ended at
        # once (their runs must wait).
        wait_until(
            lambda: gates.waiting() == {"a1", "a2", "b1"} and started.jobs_done() >= 2,
            timeout=SETTLED,
            why=lambda: f"waiting {gates.waiting()}, {statuses(runs)}\n{started.logs()}",
        )
        assert statuses(runs) == {
            "a1": RunStatus.PLANNING,
            "a2": RunStatus.PLANNING,
            "b1": RunStatus.PLANNING,
            "a3": RunStatus.QUEUED,
            "b2": RunStatus.QUEUED,
        }
        ran_phases = [n for n in range(2) if "pipeline_advance" in started.log_text(n)]
        assert ran_phases == [0, 1], "both worker processes took jobs"

        # b1 ends (awaiting approval): the owner has a place again, project A does not.
        # b2 starts; a3, older, still waits for its project.
        gates.open("b1")
        wait_until(
            lambda: "b2" in gates.waiting(),
            timeout=SETTLED,
            why=lambda: f"waiting {gates.waiting()}, {statuses(runs)}\n{started.logs()}",
        )
        assert statuses(runs)["b1"] == RunStatus.AWAITING_APPROVAL
        assert working(runs) == {"a1", "a2", "b2"}
        assert statuses(runs)["a3"] == RunStatus.QUEUED

        # a1 ends: its place in project A (and the owner's) goes to a3.
        gates.open("a1")
        wait_until(
            lambda: "a3" in gates.waiting(),
            timeout=SETTLED,
            why=lambda: f"waiting {gates.waiting()}, {statuses(runs)}\n{started.logs()}",
        )
        assert statuses(runs)["a1"] == RunStatus.AWAITING_APPROVAL
        assert working(runs) == {"a2", "b2", "a3"}

        gates.open_all()
        wait_until(
            lambda: set(statuses(runs).values()) == {RunStatus.AWAITING_APPROVAL},
            timeout=SETTLED,
            why=lambda: f"{statuses(runs)}\n{started.logs()}",
        )
