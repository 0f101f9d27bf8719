# AutoCoder for the production topology (docker-compose.yml): one image runs the web
# server (daphne), the Celery worker and celery beat.
FROM python:3.11-slim

# AutoCoder's own packages live in a virtualenv outside /usr: the sandbox shows the
# server's /usr to every test command (core/sandbox.py), and a project there must find
# only the interpreter, not the server's Django, Celery or their dependencies.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/autocoder/venv \
    PATH=/opt/autocoder/venv/bin:$PATH

WORKDIR /app

# git for linked repositories; bubblewrap for the sandbox that test commands run in
# (core/sandbox.py; without it they do not run); skopeo and umoci to pull and unpack a
# repository's base image (core/sandbox_images.py).
RUN apt-get update \
    && apt-get install -y --no-install-recommends git bubblewrap skopeo umoci \
    && rm -rf /var/lib/apt/lists/* \
    && python -m venv "$VIRTUAL_ENV"

# Dependencies first: this layer is rebuilt only when requirements.txt changes.
# (psycopg[binary] ships libpq, so no system packages are needed.)
# pip and python are the virtualenv's (PATH above): nothing goes to /usr/local.
COPY requirements.txt requirements-nodeps.txt ./
RUN pip install -r requirements.txt && pip install --no-deps -r requirements-nodeps.txt

COPY . .

# Static files are served by the app (whitenoise) from the image. Settings refuse to
# load without a SECRET_KEY when DEBUG is off: this placeholder exists for this step
# only and is not in the final environment.
RUN SECRET_KEY=collectstatic-only-placeholder-not-a-real-secret-0000 \
    python manage.py collectstatic --noinput --verbosity 0

RUN useradd --system --uid 10001 --no-create-home autocoder
USER autocoder

EXPOSE 8000
# WEB_PROCESSES daphne processes (default: one per core) sharing the port (deploy/web.py).
CMD ["python", "deploy/web.py", "--host", "0.0.0.0", "--port", "8000", "config.asgi:application"]
