"""Personas for permission tests (owner, other user, anonymous) and API clients."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from accounts.models import User
from accounts.services import api_token_create
from projects.models import Project
from tests.factories import DEFAULT_PASSWORD, ProjectFactory, UserFactory


@pytest.fixture(autouse=True)
def _clear_cache() -> None:
    # Rate-limit counters live in the cache: every test starts with none.
    cache.clear()


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
