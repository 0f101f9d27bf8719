from __future__ import annotations

import os

# numpy's BLAS threads fight each other and the worker threads on small machines: the
# embedding model ran 2-4x faster single-threaded on 2 cores. Must precede numpy's import.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Load the Celery app with Django so that @shared_task binds to it and
# `celery -A config` finds it.
from .celery import app as celery_app

__all__ = ("celery_app",)
