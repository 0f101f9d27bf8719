"""Where state lives, by topology (config/settings/base.py): the database, and Redis or
the in-process stand-ins for the cache and the channel layer."""

from __future__ import annotations

from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import ConnectionError as RedisConnectionError

from ..env import BASE_DIR, env_bool, env_database, env_int, env_redis_url, env_str

# --- Data ---------------------------------------------------------------------------

DATABASES = {"default": env_database("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A worker thread and request threads both write: IMMEDIATE transactions take the
    # write lock up front, so SQLite waits (busy timeout) instead of failing with
    # "database is locked" halfway through a read-then-write transaction.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_redis_url("REDIS_URL")
EMBEDDED = REDIS_URL is None
# The embedded worker runs inside the ASGI server process (config/asgi.py). Tests and
# management commands turn it off; `make run` leaves it on.
EMBEDDED_WORKER = env_bool("EMBEDDED_WORKER", default=EMBEDDED)
# Messages a websocket may have queued before the channel layer drops new ones for it,
# silently (both layers do). The default of 100 dropped live events for slow clients:
# bench/bench_events.py with 200 clients received 176 of 243 each.
CHANNEL_LAYER_CAPACITY = env_int("CHANNEL_LAYER_CAPACITY", default=2000)
# With Redis: "pubsub" publishes a group message once and each daphne process hands it to
# its own sockets (config/pubsub_layer.py); "per-socket" is channels-redis's list-per-socket
# layer, one Redis round trip per socket and message: 200 pages on one run saw p99 11 s
# under load (bench/RESULTS.md, "Live events to many viewers"). Kept as the benchmark's
# baseline and a fallback.
CHANNEL_LAYER = env_str("CHANNEL_LAYER", "pubsub")
CHANNEL_LAYER_BACKENDS = {
    "pubsub": "config.pubsub_layer.CatchUpPubSubChannelLayer",
    "per-socket": "channels_redis.core.RedisChannelLayer",
}
if CHANNEL_LAYER not in CHANNEL_LAYER_BACKENDS:
    raise ImproperlyConfigured(f"CHANNEL_LAYER={CHANNEL_LAYER!r} is invalid: expected pubsub or per-socket.")
# Redis pub/sub channels belong to the whole server, not to a database: two deployments on
# redis://…/0 and redis://…/1 would see each other's "task-1". The database's number is
# part of the prefix, and two on the same database need prefixes of their own.
CHANNEL_LAYER_PREFIX = env_str("CHANNEL_LAYER_PREFIX", "autocoder")
if REDIS_URL and CHANNEL_LAYER == "pubsub":
    CHANNEL_LAYER_PREFIX += f":{urlparse(REDIS_URL).path.strip('/') or '0'}:"

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "autocoder",
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": CHANNEL_LAYER_BACKENDS[CHANNEL_LAYER],
            "CONFIG": {
                # A pooled connection goes stale when Redis restarts: retry a command once
                # on a fresh connection instead of failing the websocket handshake.
                "hosts": [{"address": REDIS_URL, "retry_on_error": [RedisConnectionError]}],
                "prefix": CHANNEL_LAYER_PREFIX,
                "capacity": CHANNEL_LAYER_CAPACITY,
            },
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "config.embedded.EmbeddedChannelLayer", "CONFIG": {"capacity": CHANNEL_LAYER_CAPACITY}}
    }
