from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.urls import reverse

from accounts.models import User
from accounts.services import EMAIL_TAKEN, INVALID_CREDENTIALS, RATE_LIMITED
from projects.models import DEFAULT_PROJECT_NAME, Project
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

LOGIN = reverse("accounts:login")
REGISTER = reverse("accounts:register")
LOGOUT = reverse("accounts:logout")
BOARD = reverse("tasks:board")


def register_data(**overrides: str) -> dict[str, str]:
    data = {
        "display_name": "Carol",
        "email": "carol@example.com",
        "password": "a long enough secret",
        "password_confirm": "a long enough secret",
    }
    data.update(overrides)
    return data


# --- anonymous visitors --------------------------------------------------------------


def test_anonymous_board_redirects_to_login(client) -> None:
    response = client.get(BOARD)
    assert response.status_code == 302
    assert response["Location"] == f"{LOGIN}?next=/"


@pytest.mark.parametrize("url", [LOGIN, REGISTER])
def test_auth_pages_render_for_anonymous(client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 200
    content = response.content.decode()
    assert 'name="email"' in content
    assert 'name="password"' in content
    assert "csrfmiddlewaretoken" in content
    # No switcher or user menu for someone who is not logged in.
    assert "Switch project" not in content
    assert "current_project" not in response.context


def test_auth_pages_load_the_stylesheet_from_the_app(client) -> None:
    content = client.get(LOGIN).content.decode()
    assert '<link rel="stylesheet" href="/static/css/app.css">' in content
    assert 'src="/static/django_htmx/htmx-2.min.js"' in content
    assert "https://" not in content.split("<body", 1)[0]  # nothing from a CDN


@pytest.mark.parametrize("url", [LOGIN, REGISTER])
def test_logged_in_user_is_sent_to_the_board(client, owner: User, url: str) -> None:
    client.force_login(owner)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == BOARD


# --- registration --------------------------------------------------------------------


def test_register_creates_account_and_default_project_and_logs_in(client) -> None:
    response = client.post(REGISTER, register_data(email="  Carol@Example.com "))
    assert response.status_code == 302
    assert response["Location"] == BOARD
    user = User.objects.get(email="carol@example.com")
    assert user.display_name == "Carol"
    assert user.check_password("a long enough secret")
    assert list(Project.objects.filter(owner=user).values_list("name", flat=True)) == [DEFAULT_PROJECT_NAME]
    assert client.session[SESSION_KEY] == str(user.pk)

    board = client.get(BOARD)
    assert board.status_code == 200
    assert board.context["project"].name == DEFAULT_PROJECT_NAME
    assert "Welcome to AutoCoder" in board.content.decode()


def test_register_with_taken_email_shows_the_message(client, owner: User) -> None:
    response = client.post(REGISTER, register_data(email="ALICE@example.com"))
    assert response.status_code == 400
    assert EMAIL_TAKEN in response.content.decode()
    assert User.objects.filter(email="alice@example.com").count() == 1
    assert SESSION_KEY not in client.session


def test_register_with_short_password_shows_field_error(client) -> None:
    response = client.post(REGISTER, register_data(password="short", password_confirm="short"))
    assert response.status_code == 400
    assert "This password is too short" in response.content.decode()
    assert not User.objects.filter(email="carol@example.com").exists()


def test_register_with_different_confirmation_is_refused(client) -> None:
    response = client.post(REGISTER, register_data(password_confirm="another long secret"))
    assert response.status_code == 400
    assert "The two passwords do not match." in response.content.decode()
    assert not User.objects.exists()


@pytest.mark.parametrize(
    "overrides",
    [{"email": "not-an-email"}, {"email": ""}, {"password": "", "password_confirm": ""}, {"display_name": "x" * 101}],
)
def test_register_with_bad_input_rerenders_with_errors(client, overrides: dict[str, str]) -> None:
    response = client.post(REGISTER, register_data(**overrides))
    assert response.status_code == 400
    assert response.context["form"].errors
    assert 'class="field-error"' in response.content.decode()
    assert not User.objects.exists()


def test_register_is_rate_limited(client) -> None:
    limit = settings.AUTH_RATE_LIMIT_ATTEMPTS
    for n in range(limit):
        response = client.post(REGISTER, register_data(email=f"x{n}@example.com", password_confirm="mismatch!!"))
        assert response.status_code == 400
    response = client.post(REGISTER, register_data())
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert RATE_LIMITED in response.content.decode()
    assert not User.objects.exists()


# --- login and logout ----------------------------------------------------------------


def test_login_with_right_credentials_goes_to_the_board(client, owner: User, password: str) -> None:
    response = client.post(LOGIN, {"email": " ALICE@example.com", "password": password})
    assert response.status_code == 302
    assert response["Location"] == BOARD
    assert client.session[SESSION_KEY] == str(owner.pk)


def test_login_follows_a_local_next(client, owner: User, password: str) -> None:
    response = client.post(LOGIN, {"email": owner.email, "password": password, "next": "/projects/"})
    assert response.status_code == 302
    assert response["Location"] == "/projects/"


def test_login_ignores_an_offsite_next(client, owner: User, password: str) -> None:
    response = client.post(LOGIN, {"email": owner.email, "password": password, "next": "https://evil.example/"})
    assert response.status_code == 302
    assert response["Location"] == BOARD


def test_login_page_keeps_next_from_the_redirect(client) -> None:
    response = client.get(f"{LOGIN}?next=/projects/")
    assert response.status_code == 200
    assert '<input type="hidden" name="next" value="/projects/">' in response.content.decode()


@pytest.mark.parametrize(
    ("email", "secret"),
    [("alice@example.com", "wrong password"), ("nobody@example.com", "correct horse battery")],
)
def test_login_failure_says_exactly_invalid_email_or_password(client, owner: User, email: str, secret: str) -> None:
    response = client.post(LOGIN, {"email": email, "password": secret})
    assert response.status_code == 400
    assert response.context["form"].non_field_errors() == [INVALID_CREDENTIALS]
    assert f"<p>{INVALID_CREDENTIALS}</p>" in response.content.decode()
    assert SESSION_KEY not in client.session


def test_inactive_user_cannot_log_in(client, password: str) -> None:
    UserFactory(email="gone@example.com", is_active=False)
    response = client.post(LOGIN, {"email": "gone@example.com", "password": password})
    assert response.status_code == 400
    assert INVALID_CREDENTIALS in response.content.decode()
    assert SESSION_KEY not in client.session


def test_login_with_malformed_input_is_a_form_error_not_a_crash(client) -> None:
    response = client.post(LOGIN, {"email": "x" * 300, "password": ""})
    assert response.status_code == 400
    assert response.context["form"].errors.keys() == {"email", "password"}


def test_eleventh_login_attempt_in_a_minute_is_refused_with_429(client, owner: User, password: str) -> None:
    assert settings.AUTH_RATE_LIMIT_ATTEMPTS == 10
    for _ in range(10):
        response = client.post(LOGIN, {"email": owner.email, "password": "wrong password"})
        assert response.status_code == 400
    # Even the right password is refused now: guessing must not get through.
    response = client.post(LOGIN, {"email": owner.email, "password": password})
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= settings.AUTH_RATE_LIMIT_WINDOW_SECONDS
    assert RATE_LIMITED in response.content.decode()
    assert SESSION_KEY not in client.session


def test_logout_ends_the_session(client, owner: User) -> None:
    client.force_login(owner)
    response = client.post(LOGOUT)
    assert response.status_code == 302
    assert response["Location"] == LOGIN
    assert SESSION_KEY not in client.session
    assert client.get(BOARD).status_code == 302
    assert "You have been signed out." in client.get(LOGIN).content.decode()


def test_logout_needs_a_post(client, owner: User) -> None:
    client.force_login(owner)
    response = client.get(LOGOUT)
    assert response.status_code == 405
    assert client.session[SESSION_KEY] == str(owner.pk)


def test_logout_needs_the_csrf_token(owner: User) -> None:
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    response = browser.post(LOGOUT)
    assert response.status_code == 403
    assert browser.session[SESSION_KEY] == str(owner.pk)
