"""Personas for permission tests (owner, other user, anonymous), API clients, and the
fake Anthropic API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from accounts.models import User
from accounts.services import api_token_create
from projects.models import Project
from tests.factories import DEFAULT_PASSWORD, ProjectFactory, UserFactory
from tests.fake_anthropic import FakeAnthropicServer
from tests.fake_openai import FakeOpenAIServer
from tests.paths import searchable_by_sandbox


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Temporary folders in this process's scratch folder (config/settings/scratch_folders.py:
    searchable by the sandbox's accounts, removed at exit, or by the next test process if
    this one is killed) instead of pytest's /tmp/pytest-of-<user>: every pytest session
    that starts makes that one private again, and a test's git, which runs as another
    account, then could not reach its repositories. xdist's workers put theirs inside
    the controller's (``popen-gwN``)."""
    from config.settings.scratch_folders import process_scratch_folder

    if config.option.basetemp or hasattr(config, "workerinput"):
        return
    config.option.basetemp = str(process_scratch_folder() / "pytest")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked own_topology runs in CI's embedded pass only (.ci/run): that holds
    only while it touches nothing the pass's topology decides. The test database is the
    one such thing a test asks for by fixture, so asking for it is refused here."""
    for item in items:
        if item.get_closest_marker("own_topology") is None:
            continue
        uses_db = item.get_closest_marker("django_db") is not None or any(
            name in getattr(item, "fixturenames", ()) for name in ("db", "transactional_db", "django_db_setup")
        )
        if uses_db:
            raise pytest.UsageError(
                f"{item.nodeid} is marked own_topology but uses the test database, which the topology decides"
            )


@pytest.fixture(scope="session", autouse=True)
def _git_trusts_the_storage_account(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The tests' own git (run as root, to make and inspect repositories) works in
    folders the server's confined git made: owned by the storage account, which git
    calls "dubious ownership". As a person working in a linked folder would, the tests
    trust them in a global config of their own (which, unlike command-line config,
    also reaches the upload-pack of a local clone), including the usual one."""
    import os

    config = tmp_path_factory.mktemp("git") / "config"
    config.write_text("[safe]\n\tdirectory = *\n[include]\n\tpath = ~/.gitconfig\n")
    previous = os.environ.get("GIT_CONFIG_GLOBAL")
    os.environ["GIT_CONFIG_GLOBAL"] = str(config)
    yield
    if previous is None:
        os.environ.pop("GIT_CONFIG_GLOBAL", None)
    else:
        os.environ["GIT_CONFIG_GLOBAL"] = previous


@pytest.fixture(scope="session", autouse=True)
def _drop_test_queue() -> Iterator[None]:
    """With Redis, delete the queue that collected the jobs no test worker took."""
    yield
    from django.conf import settings

    if settings.CELERY_BROKER_URL.startswith("redis"):
        from tests.workers import delete_queue

        delete_queue(settings.CELERY_TASK_DEFAULT_QUEUE)


@pytest.fixture(autouse=True)
def _threads_leave_no_connection_open() -> Iterator[None]:
    """A net under tests.threads.DatabaseThread: what a test's finished threads left open
    is closed before the next test (tests/threads.py says why it matters)."""
    from tests.threads import connections_of_finished_threads_closed

    with connections_of_finished_threads_closed():
        yield


@pytest.fixture(autouse=True)
def _worker_not_stopping() -> None:
    # An embedded worker stopped by an earlier test leaves the process-wide flag set,
    # which would make phases and chat answers run in-process give up at once.
    from core.workers import shutdown_requested

    shutdown_requested.clear()


@pytest.fixture(autouse=True)
def _clear_cache() -> None:
    # Rate-limit counters live in the cache: every test starts with none.
    from django.conf import settings

    if settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache":
        # Only this process's keys: cache.clear() is a FLUSHDB, which would also wipe
        # the counters of a test running at the same moment in another xdist worker.
        client = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
        keys = list(client.scan_iter(f"{settings.CACHES['default']['KEY_PREFIX']}:*"))
        if keys:
            client.delete(*keys)
    else:
        cache.clear()


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """pytest's tmp_path, searchable by the sandbox's account (tests/paths.py): tests
    keep repositories and worktrees there and run test commands in them."""
    return searchable_by_sandbox(tmp_path)


@pytest.fixture(autouse=True)
def _own_repository_folders(tmp_path: Path, settings) -> None:
    """Each test's repositories and worktrees in folders of its own: a project's own
    repository is named after its id, and ids come round again from one test to the next
    (SQLite reuses the ids of rolled-back rows)."""
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")


@pytest.fixture
def password() -> str:
    return DEFAULT_PASSWORD


@pytest.fixture
def owner(db: None) -> User:
    return UserFactory(email="alice@example.com")


@pytest.fixture
def other_user(db: None) -> User:
    return UserFactory(email="bob@example.com")


@pytest.fixture
def project(owner: User) -> Project:
    return ProjectFactory(owner=owner, name="Alice's project")


@pytest.fixture
def other_project(other_user: User) -> Project:
    return ProjectFactory(owner=other_user, name="Bob's project")


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


@pytest.fixture
def owner_client(owner: User) -> APIClient:
    """Authenticated with an API token, as a script would be."""
    client = APIClient()
    _, raw = api_token_create(user=owner, name="tests")
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


@pytest.fixture
def other_client(other_user: User) -> APIClient:
    client = APIClient()
    _, raw = api_token_create(user=other_user, name="tests")
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


@pytest.fixture
def owner_session_client(owner: User) -> APIClient:
    """Logged in through the session, with CSRF checks on, as the browser is."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)
    return client


@pytest.fixture(scope="session")
def _fake_llm_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as server:
        yield server


@pytest.fixture
def fake_llm(_fake_llm_server: FakeAnthropicServer, settings) -> Iterator[FakeAnthropicServer]:
    """The fake Anthropic API, reset, with the app pointed at it."""
    _fake_llm_server.reset()
    settings.ANTHROPIC_BASE_URL = _fake_llm_server.url
    settings.ANTHROPIC_API_KEY = "sk-ant-test-key"
    settings.LLM_PROVIDER = "anthropic"
    settings.LLM_RETRY_DELAYS = [0.01, 0.02, 0.04]
    settings.LLM_TIMEOUT_SECONDS = 5
    yield _fake_llm_server
    assert _fake_llm_server.pending == 0, "the test scripted replies that were never asked for"
    assert _fake_llm_server.script_errors == []


@pytest.fixture(scope="session")
def _fake_openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def fake_openai(_fake_openai_server: FakeOpenAIServer, settings) -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI Chat Completions API, reset, as the server's OpenAI-compatible
    endpoint (LLM_PROVIDER is left to the test: "openai" makes it the default)."""
    _fake_openai_server.reset()
    settings.OPENAI_BASE_URL = _fake_openai_server.base_url
    settings.OPENAI_API_KEY = "sk-openai-test-key"
    settings.OPENAI_MODEL = "gpt-4.1"
    settings.OPENAI_LOCAL_ENDPOINT = False
    settings.LLM_RETRY_DELAYS = [0.01, 0.02, 0.04]
    settings.LLM_TIMEOUT_SECONDS = 5
    yield _fake_openai_server
    assert _fake_openai_server.pending == 0, "the test scripted replies that were never asked for"
    assert _fake_openai_server.script_errors == []
