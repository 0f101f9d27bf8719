"""Start-up with bad environment values fails at once, naming the variable; good ones
start, and pick the topology (DESIGN.md) from REDIS_URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

# Every variable the checks read, blank (= unset): the outer environment and a
# developer's .env do not leak in.
BLANK = {
    name: ""
    for name in ("DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL", "EMBEDDED_WORKER", "ALLOWED_HOSTS", "LOG_LEVEL")
}
GOOD_SECRET = "a-real-secret-key-of-more-than-32-characters-0123456789"

REPORT = """
import json, django
django.setup()
from django.conf import settings as s
print(json.dumps({
    "broker": s.CELERY_BROKER_URL,
    "channel_layer": s.CHANNEL_LAYERS["default"]["BACKEND"],
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
        ({"DEBUG": "true", "LLM_RETRY_DELAYS": "2,soon"}, "LLM_RETRY_DELAYS"),
        ({"DEBUG": "true", "LLM_RETRY_DELAYS": "-1"}, "LLM_RETRY_DELAYS"),
    ],
    ids=[
        "debug",
        "database-url",
        "redis-url",
        "secret-key-unset",
        "secret-key-short",
        "embedded-worker",
        "retry-delays",
        "retry-delays-negative",
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
        "channel_layer": "channels_redis.core.RedisChannelLayer",
        "cache": "django.core.cache.backends.redis.RedisCache",
        "database": "django.db.backends.postgresql",
        "embedded_worker": False,
    }
