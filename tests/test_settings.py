"""Start-up with bad environment values fails at once, naming the variable; good ones
start, and pick the topology (docs/ARCHITECTURE.md) from REDIS_URL."""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

# Each check starts Django in a process of its own, as a deployment would.
# Each test starts Python with the environment it sets (BLANK first): the same in either
# CI pass, so it runs in the embedded one only.
pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

# Every variable the checks read, blank (= unset): the outer environment and a
# developer's .env do not leak in.
BLANK = {
    name: ""
    for name in (
        "DEBUG",
        "SECRET_KEY",
        "CHANNEL_LAYER",
        "CHANNEL_LAYER_PREFIX",
        "DATABASE_URL",
        "REDIS_URL",
        "EMBEDDED_WORKER",
        "ALLOWED_HOSTS",
        "LOG_LEVEL",
        "TRUSTED_PROXIES",
        "SESSION_COOKIE_SECURE",
        "SECURE_PROXY_SSL",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "CONTENT_SECURITY_POLICY",
        "CONTENT_SECURITY_POLICY_REPORT_ONLY",
        "WORKER_THREADS",
    )
}
GOOD_SECRET = "a-real-secret-key-of-more-than-32-characters-0123456789"

REPORT = """
import json, django
django.setup()
from django.conf import settings as s
print(json.dumps({
    "broker": s.CELERY_BROKER_URL,
    "channel_layer": s.CHANNEL_LAYERS["default"]["BACKEND"],
    "channel_layer_prefix": s.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("prefix"),
    "cache": s.CACHES["default"]["BACKEND"],
    "database": s.DATABASES["default"]["ENGINE"],
    "embedded_worker": s.EMBEDDED_WORKER,
}))
"""


def start(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", REPORT],
        cwd=settings.BASE_DIR,
        env={**os.environ, **BLANK, "DJANGO_SETTINGS_MODULE": "config.settings.base", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DEBUG": "maybe"}, "DEBUG"),
        ({"DEBUG": "true", "DATABASE_URL": "foo://x"}, "DATABASE_URL"),
        ({"DEBUG": "true", "REDIS_URL": "http://x"}, "REDIS_URL"),
        ({"DEBUG": "false"}, "SECRET_KEY"),
        ({"DEBUG": "false", "SECRET_KEY": "short"}, "SECRET_KEY"),
        ({"DEBUG": "true", "EMBEDDED_WORKER": "sometimes"}, "EMBEDDED_WORKER"),
        ({"DEBUG": "true", "CHANNEL_LAYER": "fanout"}, "CHANNEL_LAYER"),
        ({"DEBUG": "true", "LLM_RETRY_DELAYS": "2,soon"}, "LLM_RETRY_DELAYS"),
        ({"DEBUG": "true", "LLM_RETRY_DELAYS": "-1"}, "LLM_RETRY_DELAYS"),
        ({"DEBUG": "true", "TRUSTED_PROXIES": "10.0.0.1,proxy.internal"}, "TRUSTED_PROXIES"),
        ({"DEBUG": "true", "MEMORY_CONSOLIDATE_SIMILARITY": "high"}, "MEMORY_CONSOLIDATE_SIMILARITY"),
        ({"DEBUG": "true", "MEMORY_CONSOLIDATE_SIMILARITY": "1.5"}, "MEMORY_CONSOLIDATE_SIMILARITY"),
        ({"DEBUG": "true", "MEMORY_CONSOLIDATE_SIMILARITY": "nan"}, "MEMORY_CONSOLIDATE_SIMILARITY"),
        ({"DEBUG": "true", "WORKER_THREADS": "0"}, "WORKER_THREADS"),
    ],
    ids=[
        "debug",
        "database-url",
        "redis-url",
        "secret-key-unset",
        "secret-key-short",
        "embedded-worker",
        "channel-layer",
        "retry-delays",
        "retry-delays-negative",
        "trusted-proxies",
        "consolidate-similarity",
        "consolidate-similarity-above-1",
        "consolidate-similarity-nan",
        "worker-threads",
    ],
)
def test_bad_value_stops_start_up_naming_the_variable(env: dict[str, str], named: str) -> None:
    result = start(**env)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured:"), result.stderr
    assert named in last_line


def test_no_environment_but_debug_is_the_embedded_mode() -> None:
    result = start(DEBUG="true")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "broker": "memory://localhost/",
        "channel_layer": "config.embedded.EmbeddedChannelLayer",
        "channel_layer_prefix": None,
        "cache": "django.core.cache.backends.locmem.LocMemCache",
        "database": "django.db.backends.sqlite3",
        "embedded_worker": True,
    }


def test_redis_url_is_the_production_mode() -> None:
    result = start(
        DEBUG="false",
        SECRET_KEY=GOOD_SECRET,
        DATABASE_URL="postgres://autocoder@db:5432/autocoder",
        REDIS_URL="redis://redis:6379/0",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "broker": "redis://redis:6379/0",
        "channel_layer": "config.pubsub_layer.CatchUpPubSubChannelLayer",
        # Pub/sub channels are shared by every database of a Redis server.
        "channel_layer_prefix": "autocoder:0:",
        "cache": "django.core.cache.backends.redis.RedisCache",
        "database": "django.db.backends.postgresql",
        "embedded_worker": False,
    }


def test_the_worker_runs_phases_on_worker_threads_threads() -> None:
    """`celery worker` (Procfile) takes its pool and its size from the settings."""
    script = (
        "import django; django.setup(); from config.celery import app; "
        "print(app.conf.worker_pool, app.conf.worker_concurrency)"
    )
    env = {**os.environ, **BLANK, "DJANGO_SETTINGS_MODULE": "config.settings.base", "DEBUG": "true"}
    for threads, expected in (("", "threads 16"), ("48", "threads 48")):
        result = subprocess.run(
            [sys.executable, "-c", script],
            cwd=settings.BASE_DIR,
            env={**env, "WORKER_THREADS": threads},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.stdout.strip() == expected, result.stderr


def test_the_per_socket_channel_layer_is_still_a_choice() -> None:
    result = start(DEBUG="true", REDIS_URL="redis://redis:6379/3", CHANNEL_LAYER="per-socket")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["channel_layer"] == "channels_redis.core.RedisChannelLayer"
    assert report["channel_layer_prefix"] == "autocoder"


# What a browser sees: headers of an API answer over HTTPS and over plain HTTP, made with
# Django's test client against the real settings (no database needed for a 401).
HEADERS = """
import json, django
django.setup()
from django.test import Client
secure = Client().get("/api/auth/me", secure=True)
plain = Client().get("/api/auth/me")
print(json.dumps({
    "status": secure.status_code,
    "hsts": secure.headers.get("Strict-Transport-Security"),
    "csp": secure.headers.get("Content-Security-Policy"),
    "csp_report_only": secure.headers.get("Content-Security-Policy-Report-Only"),
    "plain_status": plain.status_code,
    "plain_location": plain.headers.get("Location"),
}))
"""


def headers(tmp_path: Path, **env: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", HEADERS],
        cwd=settings.BASE_DIR,
        env={
            **os.environ,
            **BLANK,
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "ALLOWED_HOSTS": "testserver",
            # A database of the test's own, should anything open one.
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_production_sends_hsts_and_an_enforced_csp_and_redirects_to_https(tmp_path: Path) -> None:
    seen = headers(tmp_path, DEBUG="false", SECRET_KEY=GOOD_SECRET)
    assert seen["status"] == 401
    assert seen["hsts"] == "max-age=31536000; includeSubDomains; preload"
    csp = seen["csp"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert seen["csp_report_only"] is None
    assert (seen["plain_status"], seen["plain_location"]) == (301, "https://testserver/api/auth/me")


def test_security_headers_are_configurable(tmp_path: Path) -> None:
    seen = headers(
        tmp_path,
        DEBUG="false",
        SECRET_KEY=GOOD_SECRET,
        SECURE_HSTS_SECONDS="600",
        SECURE_HSTS_PRELOAD="false",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="false",
        CONTENT_SECURITY_POLICY_REPORT_ONLY="true",
        SESSION_COOKIE_SECURE="false",
    )
    assert seen["hsts"] == "max-age=600"
    assert seen["csp"] is None and "script-src 'self'" in seen["csp_report_only"]
    # Serving plain HTTP (cookies not Secure): no redirect.
    assert seen["plain_status"] == 401


def test_debug_sends_no_hsts_and_only_reports_the_csp(tmp_path: Path) -> None:
    seen = headers(tmp_path, DEBUG="true")
    assert seen["hsts"] is None
    assert seen["csp"] is None and "script-src 'self'" in seen["csp_report_only"]
    assert seen["plain_status"] == 401


def test_check_deploy_has_no_warnings(tmp_path: Path) -> None:
    secret = "".join(secrets.choice(string.ascii_letters + string.digits + "-_!@#%^&*(") for _ in range(50))
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=settings.BASE_DIR,
        env={
            **os.environ,
            **BLANK,
            "DJANGO_SETTINGS_MODULE": "config.settings.base",
            "DEBUG": "false",
            "SECRET_KEY": secret,
            # The checks open the database: one of the test's own, not ./db.sqlite3.
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
