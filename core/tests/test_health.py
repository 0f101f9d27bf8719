"""/healthz: database, broker, channel layer and worker, in both topologies."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.db import OperationalError
from django.test import Client, override_settings

from core import health, workers
from tests.workers import embedded_worker

pytestmark = pytest.mark.django_db

embedded_only = pytest.mark.skipif(not settings.EMBEDDED, reason="embedded mode (no REDIS_URL)")
redis_only = pytest.mark.skipif(settings.EMBEDDED, reason="production mode (REDIS_URL)")


def get_health(client: Client) -> tuple[int, dict[str, Any]]:
    response = client.get("/healthz")
    return response.status_code, response.json()


@pytest.fixture
def live_worker() -> Iterator[None]:
    """A worker as this topology has one: the embedded thread, or a heartbeat key."""
    if settings.EMBEDDED:
        with embedded_worker(beat=False):
            yield
    else:
        workers.record_worker_heartbeat("healthz-test@host")
        yield
        workers.forget_worker_heartbeat("healthz-test@host")


def test_all_ok_in_the_current_topology(client: Client, live_worker: None) -> None:
    status, body = get_health(client)

    assert status == 200
    assert body["status"] == "ok"
    for name in ("database", "broker", "channel_layer", "worker"):
        assert body[name]["ok"] is True, body
        assert body[name]["latency_ms"] >= 0
    assert body["worker"]["count"] >= 1
    assert body["broker"]["transport"] == ("memory" if settings.EMBEDDED else "redis")


def test_anonymous_head_and_no_secrets(client: Client, live_worker: None) -> None:
    assert client.head("/healthz").status_code == 200
    text = client.get("/healthz").content.decode()
    assert settings.SECRET_KEY not in text
    if settings.REDIS_URL:
        assert settings.REDIS_URL not in text
    assert client.post("/healthz").status_code == 405


def test_database_failure_is_503_and_the_others_still_report(client: Client, live_worker: None) -> None:
    with mock.patch(
        "django.db.backends.base.base.BaseDatabaseWrapper.cursor", side_effect=OperationalError("server gone")
    ):
        status, body = get_health(client)

    assert status == 503
    assert body["status"] == "degraded"
    assert body["database"] == {"ok": False, "error": "OperationalError", "latency_ms": mock.ANY}
    assert "server gone" not in str(body)
    assert body["broker"]["ok"] is True
    assert body["channel_layer"]["ok"] is True
    assert body["worker"]["ok"] is True


def test_no_worker_is_degraded(client: Client) -> None:
    status, body = get_health(client)

    assert body["status"] == "degraded"
    assert body["worker"]["ok"] is False
    assert body["worker"]["count"] == 0
    if settings.EMBEDDED:
        # The memory broker is served by the worker thread only: nothing would run.
        assert status == 503
        assert body["broker"]["ok"] is False
    else:
        # Workers restarting must not take the web processes out of the load balancer.
        assert status == 200
        assert body["broker"]["ok"] is True
    assert body["database"]["ok"] is True
    assert body["channel_layer"]["ok"] is True


@embedded_only
def test_stopped_embedded_worker_is_503(client: Client) -> None:
    with embedded_worker(beat=False):
        assert get_health(client)[0] == 200
    status, body = get_health(client)

    assert status == 503
    assert body["broker"]["ok"] is False
    assert body["worker"] == {"ok": False, "count": 0, "mode": "embedded", "latency_ms": mock.ANY}


@redis_only
def test_broker_down_is_503_within_the_timeout(client: Client, live_worker: None) -> None:
    started = time.monotonic()
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0"):
        status, body = get_health(client)

    assert time.monotonic() - started < health.CHECK_TIMEOUT + 1
    assert status == 503
    assert body["broker"]["ok"] is False
    assert body["broker"]["error"] == "ConnectionError"
    assert body["database"]["ok"] is True
    assert body["channel_layer"]["ok"] is True
    assert body["worker"]["ok"] is False


@redis_only
def test_expired_heartbeat_is_not_counted() -> None:
    workers.record_worker_heartbeat("healthz-expiry@host")
    assert workers.live_worker_count() == 1
    workers.forget_worker_heartbeat("healthz-expiry@host")
    assert workers.live_worker_count() == 0


def test_a_hanging_check_is_cut_off(client: Client, live_worker: None) -> None:
    def hang() -> dict[str, Any]:
        time.sleep(5)
        return {"ok": True}

    started = time.monotonic()
    with mock.patch.dict(health.CHECKS, {"channel_layer": hang}):
        status, body = get_health(client)

    assert time.monotonic() - started < health.CHECK_TIMEOUT + 1.5
    assert status == 503
    assert body["channel_layer"]["ok"] is False
    assert body["channel_layer"]["error"] == "Timeout"
    assert body["database"]["ok"] is True


def test_the_sandbox_is_reported_and_its_absence_degrades(client: Client, settings, live_worker: None) -> None:
    from core.sandbox_probe import BWRAP_MISSING, sandbox_status
    from core.tests.test_sandbox import BWRAP

    if BWRAP is not None:
        status, body = get_health(client)
        assert status == 200 and body["sandbox"]["ok"] is True, body
    # A worker that cannot make one (production: it says so in its heartbeat).
    settings.SANDBOX_BWRAP = "/nonexistent/bwrap"
    sandbox_status(refresh=True)
    if not settings.EMBEDDED:
        workers.record_worker_heartbeat("healthz-test@host")
    status, body = get_health(client)
    assert status == 200 and body["status"] == "degraded"
    assert body["sandbox"]["ok"] is False and BWRAP_MISSING in body["sandbox"]["reason"]
    assert "apt-get install bubblewrap" in body["sandbox"]["reason"]
    if not settings.EMBEDDED:
        assert body["sandbox"]["workers_without_sandbox"] == 1


def test_the_enforced_limits_are_listed(client: Client, live_worker: None) -> None:
    """Which limits hold on this host, per what and by what: an operator sees from
    /healthz whether memory and processes are held per command (a cgroup) or only per
    process or account (rlimits), and why not."""
    from core.sandbox_cgroups import cgroup_support
    from core.tests.test_sandbox import host_can_make_cgroup

    support = cgroup_support(refresh=True)
    _, body = get_health(client)
    limits = body["sandbox"]["limits"]
    for name in ("memory", "processes", "disk", "cpu", "file_size", "tmp", "wall_clock"):
        assert {"per", "by"} <= limits[name].keys(), limits
    assert limits["memory"]["mb"] == settings.VERIFY_MEMORY_MB
    assert limits["disk"] == {"per": "command", "by": "watcher (worktree)", "mb": settings.SANDBOX_DISK_MB}
    assert limits["cpu"]["per"] == "process" and limits["file_size"]["per"] == "file"
    for name, controller, rlimit in (("memory", "memory", "RLIMIT_AS"), ("processes", "pids", "RLIMIT_NPROC")):
        parent = support.parent(controller)
        assert (parent is not None) == host_can_make_cgroup(controller)
        if parent is not None:
            assert limits[name]["per"] == "command" and limits[name]["by"] == f"cgroup v{parent.version} {controller}"
        else:
            assert limits[name]["by"] == f"rlimit {rlimit}" and limits[name]["why_not_per_command"]
    assert "/sys/fs/cgroup" not in str(body)  # /healthz is public: no server paths


def test_favicon_ico_leads_to_the_icon(client) -> None:
    # The admin's pages (and browsers on their own) ask for it: a 404 in every log.
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/img/favicon.svg"
    assert finders.find("img/favicon.svg")
