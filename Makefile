# AutoCoder: every command a newcomer needs. Only Python 3.11+ is required.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint typecheck migrate superuser worker beat clean help

help:
	@echo "make run    - install, migrate and serve http://$(HOST):$(PORT) (SQLite, in-process worker)"
	@echo "make test   - install and run lint, type checks and the whole test suite"
	@echo "make worker / make beat - production processes (need REDIS_URL)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $(VENV)/.installed-run $@

migrate: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput

# Embedded mode: one daphne process serves HTTP and websockets and runs the Celery
# worker and beat in threads. DEBUG defaults on here only, for a local run.
run: $(VENV)/.installed-run
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py migrate --noinput
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	@echo "AutoCoder on http://$(HOST):$(PORT)  (create an admin with: $(BIN)/python manage.py createsuperuser)"
	DEBUG=$${DEBUG:-true} $(BIN)/daphne -b $(HOST) -p $(PORT) config.asgi:application

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/python -m pytest $(PYTEST_ARGS)

superuser: $(VENV)/.installed-run
	$(BIN)/python manage.py createsuperuser

worker: $(VENV)/.installed-run
	$(BIN)/celery -A config worker --loglevel=info

beat: $(VENV)/.installed-run
	$(BIN)/celery -A config beat --loglevel=info --scheduler django_celery_beat.schedulers:DatabaseScheduler

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .mypy_cache .ruff_cache
