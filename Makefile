# AutoCoder: every command a newcomer needs. Only Python 3.11+ is required.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: acp-agents claude-cli run up-prod prod-env demo demo-superuser test test-fast pytest lint typecheck migrate superuser worker beat clean help bench

help:
	@echo "make run    - install, migrate and serve http://$(HOST):$(PORT) (SQLite, in-process worker)"
	@echo "make test   - install and run lint, type checks and the whole test suite"
	@echo "make pytest - the test suite only (PYTEST_ARGS=... passes options)"
	@echo "make test-fast - the tests that start no process, server or browser, on xdist workers"
	@echo "make superuser / make demo-superuser - an admin in make run's / make demo's database"
	@echo "make up-prod - production topology without Docker: daphne, celery worker and beat, restarted if they exit (needs DATABASE_URL, REDIS_URL)"
	@echo "make worker / make beat - production processes (need REDIS_URL)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: requirements.txt requirements-nodeps.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt requirements-nodeps.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $(VENV)/.installed-run $@

# The Claude Code CLI, pinned (tools/claude-cli/package-lock.json): the claude-cli
# provider's tests run it, and `LLM_PROVIDER=claude-cli make demo` uses it. A native
# binary: npm is needed to install it, not Node to run it.
CLAUDE_CLI = $(CURDIR)/tools/claude-cli/node_modules/.bin/claude
$(CLAUDE_CLI): tools/claude-cli/package.json tools/claude-cli/package-lock.json
	npm ci --prefix tools/claude-cli --no-audit --no-fund --loglevel=error
	touch $@
claude-cli: $(CLAUDE_CLI)

# The coding agents a project may pick as its Coder over ACP (ACP_AGENTS), from the pinned
# manifest and lockfile: Claude Code's ACP adapter and opencode. Needs Node.js 20+ and npm.
acp-agents: tools/acp-agents/node_modules/.installed

# opencode's glob and grep need ripgrep on its PATH (it would download one, but its sandbox
# has no network): the one pinned with Claude Code's SDK, linked into node_modules/.bin.
RIPGREP_PLATFORM = $(patsubst aarch64,arm64,$(patsubst x86_64,x64,$(shell uname -m)))-linux
# `npm ci` where the registry has every platform's opencode binary package; a mirror that
# lacks some (seen here) makes `npm ci` refuse the lockfile, so the same locked versions
# are then installed without touching it. Install scripts stay off; opencode's one
# (linking its platform's binary) is run by name.
tools/acp-agents/node_modules/.installed: tools/acp-agents/package.json tools/acp-agents/package-lock.json
	npm ci --prefix tools/acp-agents --no-audit --no-fund --ignore-scripts \
		|| npm install --prefix tools/acp-agents --no-save --no-audit --no-fund --ignore-scripts
	cd tools/acp-agents/node_modules/opencode-ai && node postinstall.mjs
	mkdir -p tools/acp-agents/node_modules/.bin
	ln -sf ../@anthropic-ai/claude-agent-sdk/vendor/ripgrep/$(RIPGREP_PLATFORM)/rg tools/acp-agents/node_modules/.bin/rg
	touch $@

migrate: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput

# Embedded mode: one daphne process serves HTTP and websockets and runs the Celery
# worker and beat in threads. DEBUG defaults on here only, for a local run.
run: $(VENV)/.installed-run
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py migrate --noinput
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	@echo "AutoCoder on http://$(HOST):$(PORT)  (create an admin with: make superuser)"
	DEBUG=$${DEBUG:-true} $(BIN)/daphne -b $(HOST) -p $(PORT) config.asgi:application

# Production topology without Docker: PostgreSQL and Redis from the environment; daphne,
# one Celery worker and celery beat as separate processes (Procfile) under supervisord
# (deploy/supervise.py): a process that exits is restarted, the others keep running;
# Ctrl-C or SIGTERM stops all three.
up-prod: prod-env $(VENV)/.installed-run
	EMBEDDED_WORKER=false $(BIN)/python manage.py migrate --noinput
	EMBEDDED_WORKER=false $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	@echo "AutoCoder (production topology) on http://$(HOST):$(PORT)  health: http://$(HOST):$(PORT)/healthz"
	PATH="$(CURDIR)/$(BIN):$$PATH" EMBEDDED_WORKER=false HOST=$(HOST) PORT=$(PORT) $(BIN)/python deploy/supervise.py

prod-env:
	@test -n "$$DATABASE_URL" || { echo "make up-prod: DATABASE_URL is not set (postgres://user:password@host:5432/name)" >&2; exit 2; }
	@test -n "$$REDIS_URL" || { echo "make up-prod: REDIS_URL is not set (redis://host:6379/0)" >&2; exit 2; }

# lint-imports holds the apps to their layers (pyproject.toml, docs/ARCHITECTURE.md).
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# pytest exits non-zero on failures and also when it collects no tests (5): either
# fails make.
pytest: $(VENV)/.installed-dev $(CLAUDE_CLI) tools/acp-agents/node_modules/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: lint typecheck pytest

# The inner loop: everything but the tests marked slow (they start real processes,
# servers or browsers: pyproject.toml), spread over the cores. `make test` stays the
# whole suite, and CI runs that.
PYTEST_WORKERS ?= auto
test-fast: $(VENV)/.installed-dev $(CLAUDE_CLI) tools/acp-agents/node_modules/.installed
	$(BIN)/python -m pytest -m "not slow" -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# An admin for the Django admin, in the database `make run` serves (db.sqlite3 unless
# DATABASE_URL says otherwise) or, demo-superuser, in the demo's. ARGS go to
# createsuperuser (e.g. ARGS="--noinput --email admin@example.com" with
# DJANGO_SUPERUSER_PASSWORD set).
superuser: $(VENV)/.installed-run
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py migrate --noinput --verbosity 0
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py createsuperuser $(ARGS)

demo-superuser: $(VENV)/.installed-run
	$(DEMO_ENV) $(BIN)/python manage.py migrate --noinput --verbosity 0
	$(DEMO_ENV) $(BIN)/python manage.py createsuperuser $(ARGS)

worker: $(VENV)/.installed-run
	$(BIN)/python deploy/workers.py --loglevel=info

beat: $(VENV)/.installed-run
	$(BIN)/celery -A config beat --loglevel=info --scheduler django_celery_beat.schedulers:DatabaseScheduler

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .mypy_cache .ruff_cache

# Watch whole runs without an API key: the scripted demo model (llm/demo/, a local server
# speaking the Anthropic Messages API and OpenAI's Chat Completions: `LLM_PROVIDER=openai make
# demo` drives the runs through the latter) stands in for the API; the UI labels the model as a
# scripted demo. It needs no Django settings. Its own database, demo.sqlite3. Beside it, the
# fake forge (llm/demo/forge/) for the pull-request walk-through: repository team/demo-app,
# its branches in the sample repository's bare remote; the server may reach local addresses.
DEMO_LLM_PORT ?= 8090
DEMO_FORGE_PORT ?= 8091
DEMO_FORGE_TOKEN ?= demo-forge-token
DEMO_REPOS_ROOT ?= $(if $(REPOS_ROOT),$(REPOS_ROOT),$(CURDIR)/var/repos)
DEMO_DB ?= $(CURDIR)/demo.sqlite3
DEMO_ENV = DEBUG=true LLM_DEMO_MODE=true DATABASE_URL=sqlite:///$(DEMO_DB) \
	ANTHROPIC_BASE_URL=http://127.0.0.1:$(DEMO_LLM_PORT) ANTHROPIC_API_KEY=demo-key-not-secret \
	OPENAI_BASE_URL=http://127.0.0.1:$(DEMO_LLM_PORT)/v1 OPENAI_MODEL=$${OPENAI_MODEL:-demo-model} \
	ACP_OPENAI_BASE_URL=http://127.0.0.1:$(DEMO_LLM_PORT)/v1 ACP_OPENAI_API_KEY=demo-key-not-secret \
	ACP_OPENAI_MODEL=demo-model \
	CLONE_ALLOWED_NETWORKS=$${CLONE_ALLOWED_NETWORKS:-127.0.0.0/8} \
	CLAUDE_CLI_PATH=$${CLAUDE_CLI_PATH:-$(CLAUDE_CLI)}
# `LLM_PROVIDER=claude-cli make demo`: the pinned CLI is every agent, the demo model its API.
# `LLM_PROVIDER=openai make demo`: the demo model answers Chat Completions too.
# A project whose Coder is opencode (over ACP) asks it there as well: the agent's sandbox has
# a loopback of its own, where the relay stands in for this 127.0.0.1 port (llm/acp/sandbox.py).
demo: $(VENV)/.installed-run $(if $(filter claude-cli,$(LLM_PROVIDER)),$(CLAUDE_CLI))
	$(DEMO_ENV) $(BIN)/python manage.py migrate --noinput
	$(DEMO_ENV) $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(DEMO_ENV) $(BIN)/python manage.py repos_demo
	@echo "AutoCoder demo on http://$(HOST):$(PORT) — scripted demo model on port $(DEMO_LLM_PORT), no API key used (an admin: make demo-superuser)"
	@echo "Fake forge on http://127.0.0.1:$(DEMO_FORGE_PORT) — GitHub API http://127.0.0.1:$(DEMO_FORGE_PORT)/github, repository team/demo-app, token $(DEMO_FORGE_TOKEN), push URL demo-app-remote.git"
	@$(BIN)/python -m llm.demo --port $(DEMO_LLM_PORT) & model=$$!; \
	$(BIN)/python -m llm.demo.forge --port $(DEMO_FORGE_PORT) --token $(DEMO_FORGE_TOKEN) \
		--repository team/demo-app=$(DEMO_REPOS_ROOT)/demo-app-remote.git & forge=$$!; \
	trap 'kill $$model $$forge 2>/dev/null' EXIT INT TERM; \
	$(DEMO_ENV) $(BIN)/daphne -b $(HOST) -p $(PORT) config.asgi:application

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/run_all.py
