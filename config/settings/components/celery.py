"""Celery: the broker by topology, the worker's pool and limits, and the whole beat
schedule."""

from __future__ import annotations

import os

from celery.schedules import crontab

from ..env import env_int, env_str
from .core import TIME_ZONE
from .data import REDIS_URL

# --- Celery -------------------------------------------------------------------------

# A host name in the memory URL only silences kombu's "no hostname" warning.
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, float] = (
    # Tasks stay short (one pipeline phase each), well under this redelivery horizon.
    {"visibility_timeout": 2 * 3600}
    if REDIS_URL
    # memory:// polls once a second by default; the embedded worker should not lag.
    else {"polling_interval": 0.01}
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
# Deployments sharing one Redis keep their jobs apart with a queue name of their own.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "celery")
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A worker runs its jobs on a pool of threads: a phase spends nearly all its time waiting
# on the network (the model's stream), so one process holds many runs at once. Not too
# many: its Python runs on one core, and measured (bench/bench_concurrency.py, RESULTS.md)
# one process showed 10 runs streaming 50 tokens/s each with a token p99 of 85 ms on the
# page, 15 with 0.3 s, 20 with 2.4 s. A phase streams only part of its time (tools, git,
# tests, the model's pauses), hence 16; more runs at once: more worker processes
# (WORKER_PROCESSES below; the live log's writing since moved off the streaming threads,
# bench/bench_worker_cpu.py: a streaming run costs ~2% of a core instead of ~3%). Each
# running phase holds a database connection: the workers' threads together, plus the web
# processes', must stay under PostgreSQL's max_connections. `--concurrency` overrides it.
WORKER_THREADS = env_int("WORKER_THREADS", default=16, minimum=1)
# Worker processes per box (deploy/workers.py, the Procfile's worker command): one core
# each, as a process's Python runs on one core at a time. By default as many as the cores
# this process may use (its CPU affinity: a container's cpuset, taskset).
WORKER_PROCESSES = env_int("WORKER_PROCESSES", default=len(os.sched_getaffinity(0)), minimum=1)
CELERY_WORKER_POOL = "threads"
CELERY_WORKER_CONCURRENCY = WORKER_THREADS
# The longest a job may run. Only the prefork pool enforces Celery's limits (it kills the
# child); threads cannot be killed, so a pipeline phase enforces its own through its
# lease (PIPELINE_PHASE_TIME_LIMIT, pipelines/runs/leases.py). Kept for a prefork worker.
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", default=30 * 60, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Every periodic job, in one place. The pipeline's sweeper is not one of them but a thread
# beat starts beside itself (pipelines/runs/leases.py Sweeper, on beat_init: pipelines/apps.py):
# it hands on a phase whose worker stopped renewing its lease (PIPELINE_LEASE_SECONDS,
# 10 s) every PIPELINE_SWEEP_SECONDS (2 s). As a job it would wake with beat's database
# scheduler (every 5 s at best) and then wait for a free worker slot, behind the very
# phases that fill the slots when a run most needs handing on. The pipeline_sweep job is
# kept for deployments whose stored schedule still lists it.
CELERY_BEAT_SCHEDULE = {
    "clear-expired-sessions": {"task": "accounts.tasks.clear_expired_sessions", "schedule": crontab(minute=17)},
    "memory-cleanup-contexts": {"task": "memory.tasks.memory_cleanup_contexts", "schedule": 3600.0},
    "memory-cleanup-daily": {"task": "memory.tasks.memory_cleanup_daily", "schedule": 6 * 3600.0},
    "memory-summarise-notes": {"task": "memory.tasks.memory_summarise_notes", "schedule": 3600.0},
    "chat-expire-sessions": {"task": "chat.tasks.chat_expire_sessions", "schedule": 60.0},
    "pipeline-poll-pull-requests": {"task": "pipelines.tasks.pipeline_poll_pull_requests", "schedule": 60.0},
    "pipeline-poll-forge-issues": {"task": "pipelines.tasks.pipeline_poll_forge_issues", "schedule": 60.0},
    "pipeline-forget-forge-deliveries": {
        "task": "pipelines.tasks.pipeline_forget_forge_deliveries",
        "schedule": 3600.0,
    },
    "pipeline-cleanup-worktrees": {"task": "pipelines.tasks.pipeline_cleanup_worktrees", "schedule": 3600.0},
    "repository-evict-environments": {"task": "repos.tasks.repository_evict_environments", "schedule": 3600.0},
}
