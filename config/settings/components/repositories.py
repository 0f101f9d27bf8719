"""Linked repositories and worktrees, their environments, and what agents may do in
them: the read-only tools, the verify step, the Coder's tests and turns."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from ..env import BASE_DIR, env_int, env_ip_networks, env_list, env_str

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
# Rounds the Coder gets to make a pull request's failing checks pass before the run is
# left to a person (a repository may set its own).
CI_FIX_ROUNDS_MAX = env_int("CI_FIX_ROUNDS_MAX", default=3, minimum=0)
# How long a forge's webhook delivery is remembered (a replay within it is known and
# ignored; every delivery's effect is idempotent anyway, so forgetting one loses nothing).
FORGE_DELIVERY_RETENTION_DAYS = env_int("FORGE_DELIVERY_RETENTION_DAYS", default=30, minimum=1)
# Whose reviews on a pull request send its run back to the Coder, where the repository does
# not say: "collaborators" (people with write access on the forge) or "list" (the
# repository's own list of logins; none listed: nobody).
FORGE_TRUSTED_COMMENTERS = env_str("FORGE_TRUSTED_COMMENTERS", "collaborators")
if FORGE_TRUSTED_COMMENTERS not in ("collaborators", "list"):
    raise ImproperlyConfigured(
        f"FORGE_TRUSTED_COMMENTERS={FORGE_TRUSTED_COMMENTERS!r}: expected collaborators or list."
    )
# How long the forge's answer "may this login write here?" is kept before it is asked again.
FORGE_TRUST_CACHE_SECONDS = env_int("FORGE_TRUST_CACHE_SECONDS", default=300, minimum=0)
# A repository that imports its forge's issues (a label, or those assigned to the token's
# account) asks for the ones changed at most this often (webhooks usually report first).
FORGE_ISSUE_POLL_SECONDS = env_int("FORGE_ISSUE_POLL_SECONDS", default=300, minimum=10)
FORGE_ISSUE_POLL_BATCH = 50

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
