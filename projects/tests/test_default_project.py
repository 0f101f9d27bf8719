"""Every new user starts with exactly one default project, however the account is made:
registration, the admin's "add user", createsuperuser (accounts sends user_created,
projects answers it: projects/apps.py)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from accounts.models import User
from accounts.services import user_register
from accounts.signals import user_created
from projects.models import DEFAULT_PROJECT_NAME, Project

pytestmark = pytest.mark.django_db

PASSWORD = "a fine password 42"


def project_names(email: str) -> list[str]:
    return list(Project.objects.filter(owner__email=email).values_list("name", flat=True))


def test_registration(client: Client) -> None:
    response = client.post(
        reverse("accounts:register"),
        {"email": "New@Example.com", "password": PASSWORD, "password_confirm": PASSWORD},
    )
    assert response.status_code == 302, response.content
    assert project_names("new@example.com") == [DEFAULT_PROJECT_NAME]


def test_the_registration_service() -> None:
    user_register(email="service@example.com", password=PASSWORD, client_address="198.51.100.7")
    assert project_names("service@example.com") == [DEFAULT_PROJECT_NAME]


def test_the_admins_add_user(client: Client) -> None:
    client.force_login(User.objects.create_superuser(email="root@example.com", password="root password"))
    response = client.post(
        reverse("admin:accounts_user_add"),
        {"email": "added@example.com", "usable_password": "true", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert response.status_code == 302
    assert project_names("added@example.com") == [DEFAULT_PROJECT_NAME]
    # Changing the user later makes no other project.
    user = User.objects.get(email="added@example.com")
    changed = client.post(
        reverse("admin:accounts_user_change", args=[user.pk]),
        {
            "email": "added@example.com",
            "display_name": "Added",
            "is_active": "on",
            "api_tokens-TOTAL_FORMS": "0",
            "api_tokens-INITIAL_FORMS": "0",
        },
    )
    assert changed.status_code == 302
    assert project_names("added@example.com") == [DEFAULT_PROJECT_NAME]


def test_createsuperuser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    call_command("createsuperuser", interactive=False, email="operator@example.com", stdout=StringIO())
    operator = User.objects.get(email="operator@example.com")
    assert operator.is_superuser and operator.check_password(PASSWORD)
    assert project_names("operator@example.com") == [DEFAULT_PROJECT_NAME]


def test_create_user() -> None:
    User.objects.create_user(email="script@example.com", password=PASSWORD)
    assert project_names("script@example.com") == [DEFAULT_PROJECT_NAME]


def test_user_created_is_sent_once_inside_the_creating_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[User] = []

    def receiver(sender: type[User], user: User, **kwargs: object) -> None:
        sent.append(user)

    user_created.connect(receiver)
    try:
        user = User.objects.create_user(email="once@example.com", password=PASSWORD)
    finally:
        user_created.disconnect(receiver)
    assert sent == [user]

    def fail(*, owner: User) -> Project:
        raise RuntimeError("no project today")

    monkeypatch.setattr("projects.services.project_create_default", fail)
    with pytest.raises(RuntimeError):
        User.objects.create_user(email="rolled-back@example.com", password=PASSWORD)
    with pytest.raises(RuntimeError):
        user_register(email="rolled-back@example.com", password=PASSWORD, client_address="198.51.100.8")
    assert not User.objects.filter(email="rolled-back@example.com").exists()
