"""AutoCoder settings: everything comes from the environment (see .env.example).

Two topologies share these settings (docs/ARCHITECTURE.md, Topologies):
- embedded (no REDIS_URL): SQLite by default, in-process broker, worker and channel
  layer inside the one daphne process;
- production (REDIS_URL set, usually DATABASE_URL too): Redis is the Celery broker,
  the channel layer and the cache; workers and beat run as their own processes.

This module is where they are put together (DJANGO_SETTINGS_MODULE names it); each part
lives in config/settings/components/ and imports what it reads of another part from that
part (security reads DEBUG from core, celery the topology from data), so the order of
the imports below does not matter.
"""

from __future__ import annotations

from .components.agents import *  # noqa: F403
from .components.api import *  # noqa: F403
from .components.celery import *  # noqa: F403
from .components.core import *  # noqa: F403
from .components.data import *  # noqa: F403
from .components.repositories import *  # noqa: F403
from .components.sandbox import *  # noqa: F403
from .components.security import *  # noqa: F403
