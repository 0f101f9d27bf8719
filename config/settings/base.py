"""AutoCoder settings: everything comes from the environment (see .env.example).

Two topologies share this file (docs/ARCHITECTURE.md, Topologies):
- embedded (no REDIS_URL): SQLite by default, in-process broker, worker and channel
  layer inside the one daphne process;
- production (REDIS_URL set, usually DATABASE_URL too): Redis is the Celery broker,
  the channel layer and the cache; workers and beat run as their own processes.
"""

from __future__ import annotations

from urllib.parse import urlparse

from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import ConnectionError as RedisConnectionError

from .env import (
    BASE_DIR,
    env_bool,
    env_database,
    env_float,
    env_float_list,
    env_int,
    env_ip_networks,
    env_list,
    env_redis_url,
    env_str,
)

# --- Core ---------------------------------------------------------------------------

DEVELOPMENT_SECRET_KEY = "django-insecure-autocoder-development-key-do-not-deploy"

DEBUG = env_bool("DEBUG", default=False)
SECRET_KEY = env_str("SECRET_KEY", DEVELOPMENT_SECRET_KEY)
if not DEBUG and SECRET_KEY == DEVELOPMENT_SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY is not set. With DEBUG off AutoCoder refuses the development key: "
        "set SECRET_KEY to a long random value (python -c 'import secrets; "
        "print(secrets.token_urlsafe(50))'), or set DEBUG=true for a local run."
    )
if len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters long.")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "django_celery_beat",
    "channels",
    "core",
    "accounts",
    "projects",
    "tasks",
    "llm",
    "repos",
    "memory",
    "pipelines",
    "chat",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.ApiTrailingSlashMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "core.middleware.NulCharacterMiddleware",
    "core.middleware.NotFoundMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "projects.context_processors.current_project",
                "pipelines.context_processors.run_queue_places",
            ],
        },
    },
]

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

# --- Accounts and security ----------------------------------------------------------

AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "tasks:board"
LOGOUT_REDIRECT_URL = "accounts:login"

PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {
        "NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator",
        "OPTIONS": {"user_attributes": ("email", "display_name")},
    },
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 8},
    },
    # Eight spaces are eight characters: this one counts only the others.
    {
        "NAME": "accounts.password_validation.MinimumNonSpaceLengthValidator",
        "OPTIONS": {"min_length": 8},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# The sign-in throttle (accounts.services.auth_rate_limit_hit). In each window: login
# attempts per client address and email, and registrations per client address ...
AUTH_RATE_LIMIT_ATTEMPTS = env_int("AUTH_RATE_LIMIT_ATTEMPTS", default=10, minimum=1)
# ... and login attempts per client address, whatever the email.
AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS = env_int("AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS", default=20, minimum=1)
AUTH_RATE_LIMIT_WINDOW_SECONDS = env_int("AUTH_RATE_LIMIT_WINDOW_SECONDS", default=60, minimum=1)
# After this many failed logins for one email, the next attempt from an address that has
# failed itself must wait 1, 2, 4, ... seconds after the last failure, at most
# AUTH_BACKOFF_MAX_SECONDS. Addresses that have not failed are not slowed down, so
# someone else's guessing never locks the owner out.
AUTH_BACKOFF_AFTER_FAILURES = env_int("AUTH_BACKOFF_AFTER_FAILURES", default=5, minimum=1)
AUTH_BACKOFF_MAX_SECONDS = env_int("AUTH_BACKOFF_MAX_SECONDS", default=900, minimum=1)
# Failures are forgotten this long after the last one.
AUTH_FAILURE_MEMORY_SECONDS = env_int("AUTH_FAILURE_MEMORY_SECONDS", default=3600, minimum=60)

# Reverse proxies in front of daphne (IP addresses or CIDR networks). X-Forwarded-For is
# believed only from these (accounts.services.client_address); empty = nobody's.
TRUSTED_PROXIES = env_ip_networks("TRUSTED_PROXIES")

# API tokens stop working this many days after they are made (0 = never).
API_TOKEN_TTL_DAYS = env_int("API_TOKEN_TTL_DAYS", default=0)

SESSION_ENGINE = "core.sessions"  # database sessions; a key with a NUL names none
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=not DEBUG)
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", default=14 * 24 * 3600, minimum=60)
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if env_bool("SECURE_PROXY_SSL", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Secure cookies mean the site is served over HTTPS: plain-HTTP requests are redirected
# there, except the health check (probes speak HTTP to the container).
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=SESSION_COOKIE_SECURE)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
# Strict-Transport-Security on HTTPS responses: a year by default outside DEBUG.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=True)
# Sent on every response (core.middleware.ContentSecurityPolicyMiddleware). Pages load
# scripts and styles from static files only: no inline <script>, <style>, style="" or
# on*="" handlers in templates. With DEBUG on it is only reported (Django's debug pages
# are inline), unless CONTENT_SECURITY_POLICY_REPORT_ONLY says otherwise.
CONTENT_SECURITY_POLICY = env_str(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
)
CONTENT_SECURITY_POLICY_REPORT_ONLY = env_bool("CONTENT_SECURITY_POLICY_REPORT_ONLY", default=DEBUG)

# Bodies larger than this are refused with a 400 before any parsing.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=2 * 1024 * 1024)

# --- Internationalisation -----------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files: served by the app itself through whitenoise (no CDN) --------------

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# --- REST API -----------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header turns "not logged in" into a 401.
        "accounts.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.SafeJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.PageNumberPagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.exception_handlers.api_exception_handler",
    "PAGE_SIZE": 50,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "AutoCoder API",
    "DESCRIPTION": (
        "Kanban tasks planned, coded and reviewed by AI agents. Authenticate with "
        "`Authorization: Token <token>` (POST /api/auth/token) or the session cookie."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI assets are served by the app itself: the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "TaskStatusEnum": "tasks.models.TaskStatus",
        "RunStatusEnum": "pipelines.models.RunStatus",
        "MemorySourceEnum": "memory.models.semantic.MemorySource",
        # The facts' and goals' enum kept its name from before memories had a source.
        "SourceEnum": "memory.models.facts.Fact.Source",
    },
}

# --- Celery -------------------------------------------------------------------------

# A host name in the memory URL only silences kombu's "no hostname" warning.
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, float] = (
    # Tasks stay short (one pipeline phase each), well under this redelivery horizon.
    {"visibility_timeout": 2 * 3600}
    if REDIS_URL
    # memory:// polls once a second by default; the embedded worker should not lag.
    else {"polling_interval": 0.01}
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
# Deployments sharing one Redis keep their jobs apart with a queue name of their own.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "celery")
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A worker runs its jobs on a pool of threads: a phase spends nearly all its time waiting
# on the network (the model's stream), so one process holds many runs at once. Not too
# many: its Python runs on one core, and measured (bench/bench_concurrency.py, RESULTS.md)
# one process showed 10 runs streaming 50 tokens/s each with a token p99 of 85 ms on the
# page, 15 with 0.3 s, 20 with 2.4 s. A phase streams only part of its time (tools, git,
# tests, the model's pauses), hence 16; more runs at once: more worker processes. Each
# running phase holds a database connection: the workers' threads together, plus the web
# processes', must stay under PostgreSQL's max_connections. `--concurrency` overrides it.
WORKER_THREADS = env_int("WORKER_THREADS", default=16, minimum=1)
CELERY_WORKER_POOL = "threads"
CELERY_WORKER_CONCURRENCY = WORKER_THREADS
# The longest a job may run. Only the prefork pool enforces Celery's limits (it kills the
# child); threads cannot be killed, so a pipeline phase enforces its own through its
# lease (PIPELINE_PHASE_TIME_LIMIT, pipelines/runs/leases.py). Kept for a prefork worker.
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", default=30 * 60, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "clear-expired-sessions": {
        "task": "accounts.tasks.clear_expired_sessions",
        "schedule": crontab(minute=17),
    },
}

# --- Logging ------------------------------------------------------------------------

LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
    },
}

# --- Agent pipeline -----------------------------------------------------------------

# "anthropic" (the SDK; any Anthropic-compatible endpoint through ANTHROPIC_BASE_URL)
# or "claude-cli" (the Claude command-line tool as a subprocess).
LLM_PROVIDER = env_str("LLM_PROVIDER", "anthropic")
if LLM_PROVIDER not in {"anthropic", "claude-cli"}:
    raise ImproperlyConfigured(f"LLM_PROVIDER={LLM_PROVIDER!r} is invalid: expected anthropic or claude-cli.")
ANTHROPIC_API_KEY = env_str("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = env_str("ANTHROPIC_BASE_URL", "")
LLM_MODEL = env_str("LLM_MODEL", "claude-sonnet-4-6")
LLM_MAX_TOKENS = env_int("LLM_MAX_TOKENS", default=8192, minimum=1)
LLM_TIMEOUT_SECONDS = env_int("LLM_TIMEOUT_SECONDS", default=300, minimum=1)
# Prompt caching of agent and assistant calls (Anthropic provider): breakpoints on the
# tools, the system prompt and the conversation so far; cache writes cost 1.25x the
# input price, reads 0.1x.
LLM_PROMPT_CACHING = env_bool("LLM_PROMPT_CACHING", default=True)
# Tokens (input, cached input included, + output) one run may spend before it pauses; 0 = no limit.
RUN_TOKEN_BUDGET = env_int("RUN_TOKEN_BUDGET", default=400_000)
# Waits between retries of a failing LLM call before the run pauses (seconds).
LLM_RETRY_DELAYS = env_float_list("LLM_RETRY_DELAYS", [2.0, 4.0, 8.0])
LLM_RETRY_AFTER_CAP_SECONDS = 60.0
# The demo (`make demo`) talks to the scripted fake server; the UI says so.
LLM_DEMO_MODE = env_bool("LLM_DEMO_MODE", default=False)
CLAUDE_CLI_PATH = env_str("CLAUDE_CLI_PATH", "claude")
CLAUDE_CLI_TIMEOUT_SECONDS = env_int("CLAUDE_CLI_TIMEOUT_SECONDS", default=600, minimum=1)
# Every CLI call runs in the sandbox (llm/providers/claude_cli_sandbox.py; the API only, through
# a relay): besides /usr and the CLI's own folder it sees only these folders, read-only (e.g. a
# Node.js outside /usr).
CLAUDE_CLI_SANDBOX_PATHS = env_list("CLAUDE_CLI_SANDBOX_PATHS", [])
# A working phase whose worker has not renewed its lease for this long is re-queued.
# Workers renew every quarter of it, from one thread per process (pipelines/runs/leases.py).
PIPELINE_LEASE_SECONDS = env_int("PIPELINE_LEASE_SECONDS", default=10, minimum=5)
# How often the sweeper (a loop in the celery beat process) looks for such phases: a
# killed worker's phase runs again within about the lease plus this.
PIPELINE_SWEEP_SECONDS = env_int("PIPELINE_SWEEP_SECONDS", default=2, minimum=1)
# A phase running longer than this is no longer renewed: its lease runs out, it stops at
# its next check and the sweeper hands the run on (the thread pool has no time limits).
PIPELINE_PHASE_TIME_LIMIT = env_int("PIPELINE_PHASE_TIME_LIMIT", default=CELERY_TASK_TIME_LIMIT, minimum=10)
# Runs at once (in a working phase: planning to fixing) per user and per project (a
# project may set its own); a run over either limit waits queued, oldest first
# (pipelines/runs/places.py). Runs awaiting approval or paused do not count.
RUNS_AT_ONCE_PER_USER = env_int("RUNS_AT_ONCE_PER_USER", default=4, minimum=1)
RUNS_AT_ONCE_PER_PROJECT = env_int("RUNS_AT_ONCE_PER_PROJECT", default=2, minimum=1)
# Live token chunks are coalesced: at most one agent-log event per agent this often.
PIPELINE_LOG_FLUSH_SECONDS = 0.05

# --- Agent memory -------------------------------------------------------------------

# Half-life of a fading memory when none is given; confidence = 1 - age / half-life.
MEMORY_DEFAULT_HALF_LIFE_HOURS = env_int("MEMORY_DEFAULT_HALF_LIFE_HOURS", default=24 * 7, minimum=1)
# Before every agent call, the memories closest to the task (this project's and global
# ones, unscoped or scoped to that agent) go into its system prompt: at most this many
# (0 = none) ...
MEMORY_RECALL_LIMIT = env_int("MEMORY_RECALL_LIMIT", default=8)
# ... scoring at least this (cosine similarity × confidence). all-MiniLM-L6-v2 gives a
# short convention and a task it applies to only 0.11-0.47 (median ~0.25; "API responses
# use snake_case field names" vs "Add an endpoint that lists orders as JSON": ~0.15),
# while three in four unrelated pairs score under 0.1 (a few reach ~0.22). A lesson
# missed is lost silently; a stray one costs a line, and the best come first anyway.
MEMORY_RECALL_MIN_SCORE = env_float("MEMORY_RECALL_MIN_SCORE", default=0.1, minimum=0.0, maximum=1.0)
# A new memory this similar (cosine, MiniLM) to a live one in the same scope reinforces
# that one instead of being stored beside it (memory.services.semantic.memory_create).
# 1 turns it off but for identical wording; 0.90 joins rephrasings, not related facts.
MEMORY_CONSOLIDATE_SIMILARITY = env_float("MEMORY_CONSOLIDATE_SIMILARITY", default=0.90, minimum=0.5, maximum=1.0)
# The distillation call that turns a run's findings and feedback into lessons
# (pipelines/agents/distiller.py; a project can turn it off): its answer is capped here.
LEARN_DISTIL_MAX_TOKENS = env_int("LEARN_DISTIL_MAX_TOKENS", default=800, minimum=100)
# Context items expire this long after they are saved (0 = never).
CONTEXT_TTL_DAYS = env_int("CONTEXT_TTL_DAYS", default=30)
DAILY_LOG_RETENTION_DAYS = env_int("DAILY_LOG_RETENTION_DAYS", default=30, minimum=1)
# Agent notes longer than this (characters) are summarised by the LLM.
AGENT_NOTES_MAX_CHARS = env_int("AGENT_NOTES_MAX_CHARS", default=20_000, minimum=1000)
# At most this much of an agent's notes (the newest part) goes into its system prompt
# (0 = none).
AGENT_NOTES_PROMPT_MAX_CHARS = env_int("AGENT_NOTES_PROMPT_MAX_CHARS", default=4000)
# A chat idle for longer than this starts afresh.
CHAT_SESSION_TTL_HOURS = env_int("CHAT_SESSION_TTL_HOURS", default=24, minimum=1)
CHAT_ATTACHMENT_MAX_BYTES = env_int("CHAT_ATTACHMENT_MAX_BYTES", default=5 * 1024 * 1024, minimum=1024)
# The worker answering a session's queue holds its lease for this long, renewed every
# quarter of it while the answer is bought (chat/services.py, core/leases.py); another
# worker takes the session over only once it ran out (its holder died).
CHAT_LEASE_SECONDS = env_int("CHAT_LEASE_SECONDS", default=30, minimum=5)
CELERY_BEAT_SCHEDULE["memory-cleanup-contexts"] = {"task": "memory.tasks.memory_cleanup_contexts", "schedule": 3600.0}
CELERY_BEAT_SCHEDULE["memory-cleanup-daily"] = {"task": "memory.tasks.memory_cleanup_daily", "schedule": 6 * 3600.0}
CELERY_BEAT_SCHEDULE["memory-summarise-notes"] = {"task": "memory.tasks.memory_summarise_notes", "schedule": 3600.0}
CELERY_BEAT_SCHEDULE["chat-expire-sessions"] = {"task": "chat.tasks.chat_expire_sessions", "schedule": 60.0}

# --- Repositories ---------------------------------------------------------------------

# A project may link a git repository under this folder only (symlinks escaping it are
# refused); clones from a URL land here too.
REPOS_ROOT = env_str("REPOS_ROOT", str(BASE_DIR / "var" / "repos"))
# Each run works in its own git worktree under this folder.
WORKTREES_ROOT = env_str("WORKTREES_ROOT", str(BASE_DIR / "var" / "worktrees"))
# Worktrees of finished runs are removed this long after the run ended (branches stay).
WORKTREE_RETENTION_HOURS = env_int("WORKTREE_RETENTION_HOURS", default=72, minimum=1)
GIT_TIMEOUT_SECONDS = env_int("GIT_TIMEOUT_SECONDS", default=60, minimum=1)
GIT_CLONE_TIMEOUT_SECONDS = env_int("GIT_CLONE_TIMEOUT_SECONDS", default=600, minimum=1)
# git runs in the sandbox, which sees no key of the server's: the private key (a deploy
# key) that clones and pushes over ssh authenticate with, if any. Copied for each command.
GIT_SSH_KEY_FILE = env_str("GIT_SSH_KEY_FILE", "")
# Clone URLs whose host is (or resolves to) a loopback, private, link-local or other
# internal address are refused, except in these networks (CIDRs, comma-separated), e.g.
# the company's own git server: 10.20.0.0/16.
CLONE_ALLOWED_NETWORKS = env_ip_networks("CLONE_ALLOWED_NETWORKS")
# Open pull requests are asked about at most this often (webhooks usually report first).
PULL_REQUEST_POLL_SECONDS = env_int("PULL_REQUEST_POLL_SECONDS", default=300, minimum=10)
PULL_REQUEST_POLL_BATCH = 50
CELERY_BEAT_SCHEDULE["pipeline-poll-pull-requests"] = {
    "task": "pipelines.tasks.pipeline_poll_pull_requests",
    "schedule": 60.0,
}
CELERY_BEAT_SCHEDULE["pipeline-cleanup-worktrees"] = {
    "task": "pipelines.tasks.pipeline_cleanup_worktrees",
    "schedule": 3600.0,
}

# Environments (repos/environments/): what a repository's setup script produced, kept
# once per key (the script, the base image, the files below at the run's base commit)
# and restored into every run's worktree as hard links. Its package caches live here too.
ENVIRONMENTS_ROOT = env_str("ENVIRONMENTS_ROOT", str(BASE_DIR / "var" / "environments"))
ENVIRONMENT_SETUP_TIMEOUT_SECONDS = env_int("ENVIRONMENT_SETUP_TIMEOUT_SECONDS", default=1200, minimum=10)
# What setup may add to its worktree (a virtualenv, node_modules) and the caches.
ENVIRONMENT_SETUP_DISK_MB = env_int("ENVIRONMENT_SETUP_DISK_MB", default=8192, minimum=16)
# Names (or paths) whose contents make a prepared environment stale when they change.
ENVIRONMENT_KEY_FILES = env_list(
    "ENVIRONMENT_KEY_FILES",
    [
        "requirements*.txt",
        "constraints*.txt",
        "pyproject.toml",
        "setup.py",
        "setup.cfg",
        "uv.lock",
        "poetry.lock",
        "pdm.lock",
        "Pipfile",
        "Pipfile.lock",
        "tox.ini",
        ".python-version",
        "package.json",
        "package-lock.json",
        "npm-shrinkwrap.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "bun.lockb",
        ".nvmrc",
        "Gemfile",
        "Gemfile.lock",
        "go.mod",
        "go.sum",
        "Cargo.toml",
        "Cargo.lock",
        "composer.lock",
        ".autocoder/setup.sh",
        "devcontainer.json",
    ],
)
# Kept environments unused this long are dropped, and the least recently used while
# all of them together are over the size (hourly, and after each preparation).
ENVIRONMENT_MAX_AGE_DAYS = env_int("ENVIRONMENT_MAX_AGE_DAYS", default=14, minimum=1)
ENVIRONMENT_CACHE_MAX_MB = env_int("ENVIRONMENT_CACHE_MAX_MB", default=20480, minimum=1)
ENVIRONMENT_OUTPUT_MAX_CHARS = env_int("ENVIRONMENT_OUTPUT_MAX_CHARS", default=50_000, minimum=1000)
CELERY_BEAT_SCHEDULE["repository-evict-environments"] = {
    "task": "repos.tasks.repository_evict_environments",
    "schedule": 3600.0,
}

# The read-only tools agents use to explore a repository (list_files, read_file,
# search_code): at most this many tool turns per agent call, this many tokens spent on
# the exploration, and this many characters of output per tool result.
AGENT_TOOL_MAX_TURNS = env_int("AGENT_TOOL_MAX_TURNS", default=12, minimum=1)
AGENT_TOOL_TOKEN_LIMIT = env_int("AGENT_TOOL_TOKEN_LIMIT", default=200_000, minimum=1000)
AGENT_TOOL_OUTPUT_MAX_CHARS = env_int("AGENT_TOOL_OUTPUT_MAX_CHARS", default=20_000, minimum=1000)

# The verify step (a project's test command, run in the run's worktree).
VERIFY_TIMEOUT_SECONDS = env_int("VERIFY_TIMEOUT_SECONDS", default=600, minimum=1)
VERIFY_MEMORY_MB = env_int("VERIFY_MEMORY_MB", default=2048, minimum=64)
VERIFY_CPU_SECONDS = env_int("VERIFY_CPU_SECONDS", default=900, minimum=1)
VERIFY_OUTPUT_MAX_CHARS = env_int("VERIFY_OUTPUT_MAX_CHARS", default=200_000, minimum=1000)
# Of a test command's output (the verify step's and the Coder's run_tests), at most this
# many characters stream live and are stored as run events; past it the log says what was
# cut, and the result still keeps the last VERIFY_OUTPUT_MAX_CHARS.
VERIFY_STREAM_MAX_CHARS = env_int("VERIFY_STREAM_MAX_CHARS", default=300_000, minimum=1000)

# The Coder's run_tests tool (repos/coder_tools.py): the same command, sandbox and limits
# as the verify step, at most this many runs per conversation, and the end of the
# output, this many characters, in the tool result.
CODER_MAX_TEST_RUNS = env_int("CODER_MAX_TEST_RUNS", default=5, minimum=0)
CODER_TEST_OUTPUT_MAX_CHARS = env_int("CODER_TEST_OUTPUT_MAX_CHARS", default=8000, minimum=500)
# The Coder editing a worktree with its tools (pipelines/agents/coder.py): at most this many
# turns (calls) per coding phase, and at most this many tokens as billed (cache reads
# count a tenth: every turn re-reads the conversation from the cache).
CODER_MAX_TURNS = env_int("CODER_MAX_TURNS", default=40, minimum=1)
CODER_TOKEN_LIMIT = env_int("CODER_TOKEN_LIMIT", default=1_000_000, minimum=1000)

# --- The sandbox (core/sandbox.py) ----------------------------------------------------
# Every command that runs user or agent code (the test command, the Coder's tests) runs
# in bubblewrap: no network, no files but the run's worktree and the system toolchains,
# an unprivileged account. Where it cannot be made, such commands do not run.
SANDBOX_BWRAP = env_str("SANDBOX_BWRAP", "bwrap")
# When the server runs as root, git runs in the sandbox as this account (never root),
# which owns the repositories and worktrees AutoCoder works in; use one that nothing
# else runs as. It must be able to search down to REPOS_ROOT and WORKTREES_ROOT.
SANDBOX_UID = env_int("SANDBOX_UID", default=65534, minimum=1)
SANDBOX_GID = env_int("SANDBOX_GID", default=65534, minimum=1)
# Test commands (and the Claude CLI's agent) run as uids of their own, one per command
# running at the same moment on the host: SANDBOX_UID_POOL_START and the next
# SANDBOX_UID_POOL_SIZE - 1 uids (gid = uid). No account needs to exist for them; none
# may be used by anything else.
SANDBOX_UID_POOL_START = env_int("SANDBOX_UID_POOL_START", default=200_000, minimum=1000)
SANDBOX_UID_POOL_SIZE = env_int("SANDBOX_UID_POOL_SIZE", default=64, minimum=1)
SANDBOX_MAX_PROCESSES = env_int("SANDBOX_MAX_PROCESSES", default=256, minimum=16)
SANDBOX_FILE_SIZE_MB = env_int("SANDBOX_FILE_SIZE_MB", default=1024, minimum=1)
SANDBOX_TMP_SIZE_MB = env_int("SANDBOX_TMP_SIZE_MB", default=512, minimum=16)
# What one command may add to its worktree (on the host's disk; /tmp and home are the
# tmpfs above): watched while it runs, and the command is stopped over it.
SANDBOX_DISK_MB = env_int("SANDBOX_DISK_MB", default=2048, minimum=1)
# A repository's base image (core/sandbox_images.py): its setup and test commands run
# on the image's root filesystem, unpacked here once per manifest digest (with the pulled
# images' layouts), owned by SANDBOX_UID; it must be searchable by the sandbox's accounts.
# Pulling (skopeo) and unpacking (umoci) run confined as SANDBOX_UID, each within the
# timeout. A repository may also name a local OCI layout, `oci:<path>:<tag>`: a path
# relative to IMAGES_LOCAL_ROOT, or an absolute one under it or under REPOS_ROOT.
IMAGES_ROOT = env_str("IMAGES_ROOT", str(BASE_DIR / "var" / "images"))
IMAGES_LOCAL_ROOT = env_str("IMAGES_LOCAL_ROOT", str(BASE_DIR / "var" / "image-layouts"))
IMAGE_PULL_TIMEOUT_SECONDS = env_int("IMAGE_PULL_TIMEOUT_SECONDS", default=900, minimum=10)
# The operator's explicit, unsafe way out where no sandbox can be made: test commands
# then run as the server's own user and can read everything it can.
UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = env_bool("UNSAFE_RUN_TESTS_WITHOUT_SANDBOX", default=False)
