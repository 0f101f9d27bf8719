"""Settings for the test suite: the same as base, with fast hashing and no embedded
worker (tests start the workers they need)."""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-any-deployment-0123456789")
os.environ.setdefault("EMBEDDED_WORKER", "false")

from .base import *  # noqa: E402,F403
from .base import CACHES, STORAGES  # noqa: E402

# Hashing cost is tested on its own; everywhere else it would only slow the suite.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
if "LOCATION" in CACHES["default"]:
    # Tests flush the cache between tests (FLUSHDB): give it a Redis database of its
    # own so that the broker and the channel layer on database 0 are left alone.
    CACHES["default"]["LOCATION"] = CACHES["default"]["LOCATION"].rsplit("/", 1)[0] + "/9"
