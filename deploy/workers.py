"""Start WORKER_PROCESSES Celery workers side by side and keep them running: the
Procfile's, docker-compose.yml's and the systemd unit's ``worker`` command.

    python deploy/workers.py --loglevel=info

Why processes, not more threads: a worker runs each phase on a thread of its pool
(``--pool=threads``), but its Python runs on one core at a time, and a streaming run keeps
that core busy (bench/bench_concurrency.py: one process carried 15 runs streaming at 50
tokens/s with the tokens on the page within 100 ms, 20 not). Celery has no pool of
processes that each run threads (``--pool=prefork`` children run one job each), so this
starts ``celery -A config worker --pool=threads`` WORKER_PROCESSES times (the settings:
by default the cores this process may use), each with WORKER_THREADS threads and a node
name of its own (``worker<n>@<host>``; Celery refuses two nodes of one name), all taking
jobs from the same queue. With one process it simply becomes that worker (exec).

A worker that exits while the others run is started again a second later (1, 2, 3 … s
later while it keeps dying within STARTED_AFTER_SECONDS of its start), the others keep
running. SIGTERM or SIGINT is passed to every worker, each stops warm (its running phases
hand their work back), and this exits when they all have; a supervisor's SIGKILL of the
process group (supervisord, systemd, docker) ends them all. Extra arguments go to each
``celery worker`` (``--loglevel=info``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARTED_AFTER_SECONDS = 5
POLL_SECONDS = 0.5


def worker_processes() -> int:
    """WORKER_PROCESSES from the settings (which check the variable and know the default)."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
    from django.conf import settings

    return int(settings.WORKER_PROCESSES)


def worker_commands(processes: int, arguments: list[str]) -> list[list[str]]:
    """The ``celery worker`` command of each process: the same pool and queue, its own node name."""
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=threads", *arguments]
    if processes == 1:
        return [command]
    return [[*command, "-n", f"worker{number}@%h"] for number in range(1, processes + 1)]


class Workers:
    def __init__(self, commands: list[list[str]]) -> None:
        self.commands = commands
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * len(commands)
        self.started_at = [0.0] * len(commands)
        self.quick_deaths = [0] * len(commands)
        self.restart_at = [0.0] * len(commands)
        self.stopping = False

    def start(self, number: int) -> None:
        self.processes[number] = subprocess.Popen(self.commands[number], cwd=ROOT)  # noqa: S603 - our own celery command
        self.started_at[number] = time.monotonic()

    def stop(self, signum: int, _frame: object = None) -> None:
        self.stopping = True
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)

    def run(self) -> int:
        for number in range(len(self.commands)):
            self.start(number)
        while True:
            if self.stopping:
                for process in self.processes:
                    if process is not None:
                        process.wait()
                return 0
            now = time.monotonic()
            for number, process in enumerate(self.processes):
                if process is None:
                    if now >= self.restart_at[number]:
                        self.start(number)
                    continue
                code = process.poll()
                if code is None or self.stopping:
                    continue
                quick = now - self.started_at[number] < STARTED_AFTER_SECONDS
                self.quick_deaths[number] = self.quick_deaths[number] + 1 if quick else 0
                delay = 1 + self.quick_deaths[number]
                print(
                    f"workers: worker {number + 1} exited ({code}); starting it again in {delay} s",
                    file=sys.stderr,
                    flush=True,
                )
                self.processes[number] = None
                self.restart_at[number] = now + delay
            time.sleep(POLL_SECONDS)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    commands = worker_commands(worker_processes(), arguments)
    if len(commands) == 1:
        sys.stdout.flush()
        os.chdir(ROOT)
        os.execv(commands[0][0], commands[0])  # noqa: S606 - no shell wanted
    workers = Workers(commands)
    signal.signal(signal.SIGTERM, workers.stop)
    signal.signal(signal.SIGINT, workers.stop)
    return workers.run()


if __name__ == "__main__":
    sys.exit(main())
