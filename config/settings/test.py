"""Settings for the test suite: the same as base, with fast hashing and no embedded
worker (tests start the workers they need)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-any-deployment-0123456789")
os.environ.setdefault("EMBEDDED_WORKER", "false")

from .base import *  # noqa: F403
from .base import CACHES, DATABASES, STORAGES

# Hashing cost is tested on its own; everywhere else it would only slow the suite.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
if "LOCATION" in CACHES["default"]:
    # Tests flush the cache between tests (FLUSHDB): give it a Redis database of its
    # own so that the broker and the channel layer on database 0 are left alone.
    CACHES["default"]["LOCATION"] = CACHES["default"]["LOCATION"].rsplit("/", 1)[0] + "/9"
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Worker threads and subprocesses must see the test database, and Django's default
    # SQLite test database lives in memory. A file instead, one per test process so
    # that runs side by side do not share it (pytest-xdist adds its own suffix).
    DATABASES["default"]["TEST"] = {"NAME": str(Path(tempfile.gettempdir()) / f"autocoder-test-{os.getpid()}.sqlite3")}
