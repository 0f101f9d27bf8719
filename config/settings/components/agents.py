"""The agents: the model provider, the pipeline's leases and limits, memory and chat."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..env import BASE_DIR, env_bool, env_float, env_float_list, env_int, env_list, env_str
from .celery import CELERY_TASK_TIME_LIMIT

# --- Agent pipeline -----------------------------------------------------------------

# "anthropic" (the SDK; any Anthropic-compatible endpoint through ANTHROPIC_BASE_URL),
# "openai" (any OpenAI-compatible Chat Completions endpoint through OPENAI_BASE_URL) or
# "claude-cli" (the Claude command-line tool as a subprocess).
LLM_PROVIDER = env_str("LLM_PROVIDER", "anthropic")
if LLM_PROVIDER not in {"anthropic", "openai", "claude-cli"}:
    raise ImproperlyConfigured(f"LLM_PROVIDER={LLM_PROVIDER!r} is invalid: expected anthropic, openai or claude-cli.")
ANTHROPIC_API_KEY = env_str("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = env_str("ANTHROPIC_BASE_URL", "")
LLM_MODEL = env_str("LLM_MODEL", "claude-sonnet-4-6")
# The OpenAI-compatible endpoint (LLM_PROVIDER=openai, or a project set to it without a
# base URL of its own): the operator's, so trusted (not checked like a project owner's).
# The key may stay empty for a local server (Ollama, llama.cpp, vLLM without --api-key):
# a placeholder is then sent, only to a loopback or private address.
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL", "https://api.openai.com/v1")
OPENAI_API_KEY = env_str("OPENAI_API_KEY", "")
OPENAI_MODEL = env_str("OPENAI_MODEL", "gpt-4.1")
# The endpoint is one's own (a GPU box on a public address): its calls cost nothing per
# token. Loopback and private addresses are taken as local without it.
OPENAI_LOCAL_ENDPOINT = env_bool("OPENAI_LOCAL_ENDPOINT", default=False)
LLM_MAX_TOKENS = env_int("LLM_MAX_TOKENS", default=8192, minimum=1)
LLM_TIMEOUT_SECONDS = env_int("LLM_TIMEOUT_SECONDS", default=300, minimum=1)
# Prompt caching of agent and assistant calls (Anthropic provider): breakpoints on the
# tools, the system prompt and the conversation so far; cache writes cost 1.25x the
# input price, reads 0.1x.
LLM_PROMPT_CACHING = env_bool("LLM_PROMPT_CACHING", default=True)
# Context editing of the agents' conversations (llm/context_editing.py): once a request's
# prompt reaches CONTEXT_EDITING_TRIGGER_TOKENS (0 = off), its oldest tool results are
# cleared, in batches of at least CONTEXT_EDITING_CLEAR_AT_LEAST tokens (each batch costs
# one rewrite of the cache), keeping the latest CONTEXT_EDITING_KEEP_TOOL_USES and those of
# CONTEXT_EDITING_EXCLUDE_TOOLS. The Anthropic API does it itself (its context management);
# for an OpenAI-compatible endpoint the same rule is applied before sending, keeping every
# edit's result. Defaults tuned by bench/bench_context_editing.py.
CONTEXT_EDITING_TRIGGER_TOKENS = env_int("CONTEXT_EDITING_TRIGGER_TOKENS", default=25_000)
CONTEXT_EDITING_KEEP_TOOL_USES = env_int("CONTEXT_EDITING_KEEP_TOOL_USES", default=3)
CONTEXT_EDITING_CLEAR_AT_LEAST = env_int("CONTEXT_EDITING_CLEAR_AT_LEAST", default=20_000)
CONTEXT_EDITING_EXCLUDE_TOOLS = env_list("CONTEXT_EDITING_EXCLUDE_TOOLS", [])
# Tokens (input, cached input included, + output) one run may spend before it pauses; 0 = no limit.
RUN_TOKEN_BUDGET = env_int("RUN_TOKEN_BUDGET", default=400_000)
# What one task's runs may spend together (USD, every round of every run) before the work
# pauses; 0 = no ceiling. A project may set its own (pipelines/runs/ceiling.py).
TASK_SPEND_CEILING_USD = env_float("TASK_SPEND_CEILING_USD", default=0.0)
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
# Coding agents over ACP (llm/acp/provider.py): a project or task may pick one as its
# Coder instead of the built-in one. Installed from the pinned manifest in tools/acp-agents
# (`npm ci --prefix tools/acp-agents`). Each: its command line; the API it talks to
# ("anthropic": the run's or the server's Anthropic key and ANTHROPIC_BASE_URL; "openai": an
# OpenAI-compatible endpoint, ACP_OPENAI_*); fixed variables; the folders its sandbox shows
# read-only (its install). ACP_AGENTS_JSON (a JSON object of the same shape) adds or replaces.
ACP_AGENTS_ROOT = env_str("ACP_AGENTS_ROOT", str(BASE_DIR / "tools" / "acp-agents"))
ACP_AGENTS: dict[str, dict[str, Any]] = {
    "claude-code": {
        "label": "Claude Code (ACP)",
        "command": [f"{ACP_AGENTS_ROOT}/node_modules/@zed-industries/claude-code-acp/dist/index.js"],
        "api": "anthropic",
        "paths": [ACP_AGENTS_ROOT],
    },
    "opencode": {
        "label": "opencode",
        "command": [f"{ACP_AGENTS_ROOT}/node_modules/opencode-ai/bin/opencode.exe", "acp"],
        "api": "openai",
        # Its provider, model and permissions (every edit and command asks AutoCoder).
        "env": {
            "OPENCODE_CONFIG": f"{ACP_AGENTS_ROOT}/opencode.json",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            # Its glob and grep run ripgrep, linked there by `make acp-agents`.
            "PATH": f"/usr/local/bin:/usr/bin:/bin:{ACP_AGENTS_ROOT}/node_modules/.bin",
            # It talks to a server of its own on the sandbox's loopback: not through the
            # relay's proxy (llm/providers/sandbox_relay.py); an API on the host's loopback
            # is reached at its own address there, where the relay stands in for it.
            "AUTOCODER_RELAY_NO_PROXY": "127.0.0.1,localhost",
        },
        "paths": [ACP_AGENTS_ROOT],
    },
}
try:
    _acp_agents_extra = json.loads(env_str("ACP_AGENTS_JSON", "") or "{}")
except ValueError as exc:
    raise ImproperlyConfigured(f"ACP_AGENTS_JSON is not JSON: {exc}") from None
if not isinstance(_acp_agents_extra, dict):
    raise ImproperlyConfigured("ACP_AGENTS_JSON must be a JSON object: name -> {command, api, env, paths}.")
ACP_AGENTS.update(_acp_agents_extra)
for _name, _entry in ACP_AGENTS.items():
    _command = _entry.get("command") if isinstance(_entry, dict) else None
    if not isinstance(_command, list) or not _command or not all(isinstance(part, str) for part in _command):
        raise ImproperlyConfigured(f"ACP_AGENTS[{_name!r}] needs a command: a non-empty list of strings.")
    if _entry.get("api", "anthropic") not in {"anthropic", "openai"}:
        raise ImproperlyConfigured(f"ACP_AGENTS[{_name!r}]['api'] must be anthropic or openai.")
    if _name == "built-in":
        raise ImproperlyConfigured("ACP_AGENTS may not name an agent 'built-in': that is AutoCoder's own Coder.")
ACP_OPENAI_BASE_URL = env_str("ACP_OPENAI_BASE_URL", "")
ACP_OPENAI_API_KEY = env_str("ACP_OPENAI_API_KEY", "")
ACP_OPENAI_MODEL = env_str("ACP_OPENAI_MODEL", "")
# One prompt turn of an ACP agent (the whole coding round) at most this long.
ACP_AGENT_TIMEOUT_SECONDS = env_int("ACP_AGENT_TIMEOUT_SECONDS", default=900, minimum=1)
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
# Live token chunks are coalesced: at most one agent-log event per agent this often. A
# token waits up to this long in the worker (plus the flush): the window is most of the
# page's token latency (100 ms p99 wanted), and each event costs the worker's core.
PIPELINE_LOG_FLUSH_SECONDS = env_float("PIPELINE_LOG_FLUSH_SECONDS", default=0.05, minimum=0.005, maximum=1.0)
# One thread per process writes every streaming agent's log, one INSERT for all, off the
# threads that read the models' streams (pipelines/agent_log.py). Off: each stream writes
# its own on its thread (the test settings, whose database the test's transaction holds).
PIPELINE_LOG_FLUSHER = env_bool("PIPELINE_LOG_FLUSHER", default=True)

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
# A lesson learned on some files (a comment on their lines, a finding in them) is
# recalled only for a task touching one of them, and then ranks this much higher than
# its similarity × confidence: the file it cites says it applies.
MEMORY_RECALL_PATH_BONUS = env_float("MEMORY_RECALL_PATH_BONUS", default=0.25, minimum=0.0, maximum=1.0)
# A new memory this similar (cosine, MiniLM) to a live one in the same scope reinforces
# that one instead of being stored beside it (memory.services.semantic.memory_create).
# 1 turns it off but for identical wording; 0.90 joins rephrasings, not related facts.
MEMORY_CONSOLIDATE_SIMILARITY = env_float("MEMORY_CONSOLIDATE_SIMILARITY", default=0.90, minimum=0.5, maximum=1.0)
# An owner with at least this many memories is searched from a copy of their vectors
# in each process's RAM (memory.owner_vectors: 1.5 KB a memory; exact all the same,
# the database still filters and dates the most similar rows) ...
MEMORY_VECTORS_IN_RAM_MIN = env_int("MEMORY_VECTORS_IN_RAM_MIN", default=5_000, minimum=1)
# ... and a process keeps at most this many MB of such copies (the least recently
# searched owner's dropped first; an owner over it is searched in the database).
MEMORY_VECTORS_IN_RAM_MB = env_int("MEMORY_VECTORS_IN_RAM_MB", default=512, minimum=0)
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
