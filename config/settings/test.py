"""Settings for the test suite: the same as base, with fast hashing and no embedded
worker (tests start the workers they need)."""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-any-deployment-0123456789")
os.environ.setdefault("EMBEDDED_WORKER", "false")
# The test client speaks plain HTTP; tests of the HTTPS redirect set it themselves.
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")

from .base import *  # noqa: F403
from .base import CACHES, CELERY_BROKER_URL, DATABASES, STORAGES
from .scratch_folders import process_scratch_folder

# The SQLite test database, repositories and worktrees of this process, in its own folder
# (removed at exit, or by the next test process if this one is killed).
_scratch = process_scratch_folder()

# Hashing cost is tested on its own; everywhere else it would only slow the suite.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
if "LOCATION" in CACHES["default"]:
    # Tests clear the cache between tests: give it a Redis database of its own so that
    # the broker and the channel layer on database 0 are left alone...
    CACHES["default"]["LOCATION"] = CACHES["default"]["LOCATION"].rsplit("/", 1)[0] + "/9"
    # ... and keys of this process's own: pytest-xdist workers share that database, and
    # a FLUSHDB by one wiped the rate-limit counters another test was counting up.
    CACHES["default"]["KEY_PREFIX"] = f"autocoder-test-{os.getpid()}"
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Worker threads and subprocesses must see the test database, and Django's default
    # SQLite test database lives in memory. A file instead, in a folder of this process
    # so that runs side by side do not share it (pytest-xdist adds its own suffix).
    # The folder goes at exit: Django deletes the file, but not the -wal and -shm files
    # of connections other threads still hold.
    DATABASES["default"]["TEST"] = {"NAME": str(_scratch / "db.sqlite3")}

if CELERY_BROKER_URL.startswith("redis"):
    # Jobs that tests queue and no worker takes (a run started over the API, say) go to
    # a queue of this process's own, deleted when the session ends (conftest.py), not
    # to the default queue a real worker on this Redis would run them from.
    CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE") or f"autocoder-test-{os.getpid()}"

# Repositories and worktrees that tests make go to the folder of this process (tests that
# link repositories point REPOS_ROOT at their own tmp_path); the sandbox's account can
# search its way to them (scratch_folders.py).
REPOS_ROOT = str(_scratch / "repos")
WORKTREES_ROOT = str(_scratch / "worktrees")

# Agent logs are written by the thread that streams them: a flusher thread of its own
# would write on another connection, outside the test's transaction (and its rows).
# Tests of the flusher turn it on (pipelines/tests/test_agent_log.py).
PIPELINE_LOG_FLUSHER = False
