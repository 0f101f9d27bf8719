"""Health checks behind ``/healthz``: database, broker, channel layer and worker.

Every check runs in a daemon thread of its own, all at once, and is given up on after
``CHECK_TIMEOUT`` seconds: an unreachable PostgreSQL or Redis makes the endpoint slow
by that much at most, never hang. A check reports ``ok``, ``latency_ms`` and, when it
fails, the exception's class name only (messages can carry host names and users).

Verdict: the database, the broker and the channel layer are required (HTTP 503 when
any fails); a missing worker, or workers that cannot sandbox test commands (they then
refuse to run them), make the status ``degraded`` but keep HTTP 200, so a load balancer
keeps serving pages while workers restart.

Workers are seen through a heartbeat (production): each ``celery worker`` sets a key
in the broker's Redis every ``HEARTBEAT_INTERVAL`` seconds with a ``HEARTBEAT_TTL``
expiry (core/workers.py, ``WorkerHeartbeat``), and the check counts the live keys. In
the embedded mode the broker is in memory and the worker is a thread of this process
(registered in core/workers.py): both report its state.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections

from core.sandbox_limits import limits_enforcement
from core.sandbox_probe import sandbox_status
from core.workers import embedded_worker_alive, live_worker_count, live_worker_sandboxes, redis_client

logger = logging.getLogger(__name__)

CHECK_TIMEOUT = 1.5
REQUIRED = ("database", "broker", "channel_layer")
SANDBOX_DISABLED_HEALTH = (
    "UNSAFE_RUN_TESTS_WITHOUT_SANDBOX is on: test commands run as the server's own user, unsandboxed."
)

Check = dict[str, Any]


@dataclass(frozen=True)
class HealthReport:
    checks: dict[str, Check]

    @property
    def healthy(self) -> bool:
        """The required services answer: serve traffic."""
        return all(self.checks[name]["ok"] for name in REQUIRED)

    @property
    def status(self) -> str:
        return "ok" if all(check["ok"] for check in self.checks.values()) else "degraded"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, **self.checks}


# --- Checks (each returns extra fields and raises on failure) --------------------------


def check_database() -> Check:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        # A thread of its own: its connection would outlive it otherwise.
        connections.close_all()
    return {"ok": True}


def check_broker() -> Check:
    if settings.EMBEDDED:
        # memory:// lives in this process; it is served only while the worker thread runs.
        return {"ok": embedded_worker_alive(), "transport": "memory"}
    client = redis_client(settings.CELERY_BROKER_URL, CHECK_TIMEOUT)
    try:
        client.ping()
    finally:
        client.close()
    return {"ok": True, "transport": "redis"}


def check_channel_layer() -> Check:
    layer = get_channel_layer()
    if layer is None:
        return {"ok": False, "error": "NotConfigured"}
    token = uuid.uuid4().hex

    async def round_trip() -> bool:
        channel = await layer.new_channel("healthz.")
        await layer.send(channel, {"type": "healthz.ping", "token": token})
        message = await asyncio.wait_for(layer.receive(channel), CHECK_TIMEOUT)
        return bool(message.get("token") == token)

    return {"ok": async_to_sync(round_trip)()}


def check_worker() -> Check:
    if settings.EMBEDDED:
        alive = embedded_worker_alive()
        return {"ok": alive, "count": int(alive), "mode": "embedded"}
    count = live_worker_count()
    return {"ok": count > 0, "count": count, "mode": "heartbeat"}


def check_sandbox() -> Check:
    """Whether the workers can sandbox test commands (they refuse to run them if not).

    Embedded: this process is the worker and probes itself. Production: each worker
    puts its own verdict in its heartbeat; the check fails if any live worker cannot.
    ``limits`` says which limits hold, per what (command, process, file) and by what
    (cgroup, rlimit, watcher) — the first failing worker's, or the first worker's."""
    if settings.EMBEDDED:
        status = sandbox_status()
        return _sandbox_verdict({**status.as_dict(), "limits": limits_enforcement(sandboxed=not status.disabled)})
    reports = live_worker_sandboxes()
    if not reports:
        return {"ok": False, "reason": "No live worker has reported whether it can make a sandbox."}
    failing = [report for report in reports if not report.get("available")]
    verdict = _sandbox_verdict(failing[0] if failing else reports[0])
    verdict["workers"] = len(reports)
    verdict["workers_without_sandbox"] = len(failing)
    return verdict


def _sandbox_verdict(report: dict[str, Any]) -> Check:
    limits = {"limits": report["limits"]} if isinstance(report.get("limits"), dict) else {}
    if report.get("disabled"):
        return {"ok": False, "disabled": True, "reason": SANDBOX_DISABLED_HEALTH, **limits}
    if not report.get("available"):
        return {"ok": False, "reason": report.get("message") or "unknown", **limits}
    return {"ok": True, **limits}


# --- Running them -------------------------------------------------------------------

CHECKS: dict[str, Callable[[], Check]] = {
    "database": check_database,
    "broker": check_broker,
    "channel_layer": check_channel_layer,
    "worker": check_worker,
    "sandbox": check_sandbox,
}


class _Probe(threading.Thread):
    def __init__(self, name: str, check: Callable[[], Check]) -> None:
        super().__init__(name=f"healthz-{name}", daemon=True)
        self.check = check
        self.result: Check | None = None
        self.started_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        try:
            result = self.check()
        except Exception as exc:  # noqa: BLE001 - any failure means "not healthy"
            result = {"ok": False, "error": exc.__class__.__name__}
        result["latency_ms"] = round((time.monotonic() - self.started_at) * 1000, 1)
        self.result = result


def system_health(timeout: float = CHECK_TIMEOUT) -> HealthReport:
    """Run every check concurrently; a check still running after ``timeout`` fails."""
    probes = {name: _Probe(name, check) for name, check in CHECKS.items()}
    started = time.monotonic()
    for probe in probes.values():
        probe.start()
    checks: dict[str, Check] = {}
    for name, probe in probes.items():
        # A little over the checks' own timeouts, so that they report their own error.
        probe.join(max(0.0, started + timeout + 0.5 - time.monotonic()))
        result = probe.result
        if result is None:
            result = {"ok": False, "error": "Timeout", "latency_ms": round((time.monotonic() - started) * 1000, 1)}
        checks[name] = result
    return HealthReport(checks=checks)
