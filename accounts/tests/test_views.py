from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.urls import reverse

from accounts.models import ApiToken, User
from accounts.services import (
    BACKING_OFF,
    EMAIL_TAKEN,
    INVALID_CREDENTIALS,
    RATE_LIMITED,
    WRONG_CURRENT_PASSWORD,
    api_token_create,
)
from projects.models import DEFAULT_PROJECT_NAME, Project
from tests.factories import DEFAULT_PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

LOGIN = reverse("accounts:login")
REGISTER = reverse("accounts:register")
LOGOUT = reverse("accounts:logout")
PASSWORD = reverse("accounts:password")
TOKENS = reverse("accounts:tokens")
BOARD = reverse("tasks:board")
NEW_PASSWORD = "a brand new passphrase"


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


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("password", "This password is too common."),
        ("12345678", "This password is too common."),
        (" " * 8, "This password needs at least 8 characters other than spaces."),
    ],
)
def test_register_with_a_weak_password_shows_field_errors(client, password: str, message: str) -> None:
    response = client.post(REGISTER, register_data(password=password, password_confirm=password))
    assert response.status_code == 400
    assert message in response.context["form"].errors["password"]
    assert message in response.content.decode()
    assert not User.objects.exists()


def test_register_is_rate_limited(client) -> None:
    limit = settings.AUTH_RATE_LIMIT_ATTEMPTS
    for n in range(limit):
        # Refused by the password rules, after the attempt was counted.
        response = client.post(
            REGISTER, register_data(email=f"x{n}@example.com", password="password", password_confirm="password")
        )
        assert response.status_code == 400
    # A spoofed forwarded address changes nothing without trusted proxies.
    response = client.post(REGISTER, register_data(), HTTP_X_FORWARDED_FOR="192.0.2.1")
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


def test_eleventh_login_attempt_in_a_minute_is_refused_with_429(client, owner: User, password: str, settings) -> None:
    assert settings.AUTH_RATE_LIMIT_ATTEMPTS == 10
    settings.AUTH_BACKOFF_AFTER_FAILURES = 1000  # the window alone, without the backoff
    for _ in range(10):
        response = client.post(LOGIN, {"email": owner.email, "password": "wrong password"})
        assert response.status_code == 400
    # Even the right password is refused from this address now: guessing must not get through.
    response = client.post(LOGIN, {"email": owner.email, "password": password})
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= settings.AUTH_RATE_LIMIT_WINDOW_SECONDS
    assert RATE_LIMITED in response.content.decode()
    assert SESSION_KEY not in client.session


def test_failed_logins_back_off_the_failing_address_not_the_owner(client, owner: User, password: str) -> None:
    for _ in range(settings.AUTH_BACKOFF_AFTER_FAILURES):
        response = client.post(LOGIN, {"email": owner.email, "password": "wrong password"}, REMOTE_ADDR="203.0.113.9")
        assert response.status_code == 400
    response = client.post(LOGIN, {"email": owner.email, "password": password}, REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 429
    assert response["Retry-After"] == "1"
    assert BACKING_OFF in response.content.decode()
    assert SESSION_KEY not in client.session
    # The owner, elsewhere, after more than ten guesses against the account.
    for n in range(10):
        client.post(LOGIN, {"email": owner.email, "password": "wrong password"}, REMOTE_ADDR=f"198.51.100.{n}")
    response = client.post(LOGIN, {"email": owner.email, "password": password}, REMOTE_ADDR="192.0.2.44")
    assert response.status_code == 302
    assert client.session[SESSION_KEY] == str(owner.pk)


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


# --- account pages: password -------------------------------------------------------------


def test_account_pages_need_a_login(client) -> None:
    for url in (PASSWORD, TOKENS):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"] == f"{LOGIN}?next={url}"


def test_the_account_menu_links_the_account_pages(client, owner: User) -> None:
    client.force_login(owner)
    content = client.get(BOARD).content.decode()
    assert f'href="{PASSWORD}"' in content
    assert f'href="{TOKENS}"' in content


def test_password_change_page_keeps_this_session_and_ends_the_others(client, owner: User) -> None:
    from django.test import Client

    elsewhere = Client()
    elsewhere.force_login(owner)
    client.force_login(owner)
    api_token_create(user=owner, name="ci")
    assert client.get(PASSWORD).status_code == 200

    response = client.post(
        PASSWORD,
        {"current_password": DEFAULT_PASSWORD, "new_password": NEW_PASSWORD, "new_password_confirm": NEW_PASSWORD},
    )
    assert response.status_code == 302
    assert response["Location"] == PASSWORD
    owner.refresh_from_db()
    assert owner.check_password(NEW_PASSWORD)
    page = client.get(PASSWORD)
    assert page.status_code == 200
    assert "Your password was changed" in page.content.decode()
    assert "1 API token was revoked" in page.content.decode()
    assert elsewhere.get(BOARD).status_code == 302  # signed out
    assert not ApiToken.objects.filter(user=owner).exists()


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (
            {"current_password": "not mine!", "new_password": NEW_PASSWORD, "new_password_confirm": NEW_PASSWORD},
            "current_password",
            WRONG_CURRENT_PASSWORD,
        ),
        (
            {"current_password": DEFAULT_PASSWORD, "new_password": "password", "new_password_confirm": "password"},
            "new_password",
            "This password is too common.",
        ),
        (
            {"current_password": DEFAULT_PASSWORD, "new_password": NEW_PASSWORD, "new_password_confirm": "other one!"},
            "new_password_confirm",
            "The two passwords do not match.",
        ),
    ],
)
def test_password_change_page_shows_field_errors(client, owner: User, data: dict, field: str, message: str) -> None:
    client.force_login(owner)
    response = client.post(PASSWORD, data)
    assert response.status_code == 400
    assert message in response.context["form"].errors[field]
    owner.refresh_from_db()
    assert owner.check_password(DEFAULT_PASSWORD)


# --- account pages: API tokens -------------------------------------------------------------


def test_tokens_page_lists_only_your_tokens(client, owner: User, other_user: User) -> None:
    api_token_create(user=owner, name="laptop")
    api_token_create(user=other_user, name="bobs-secret-box")
    client.force_login(owner)
    response = client.get(TOKENS)
    assert response.status_code == 200
    content = response.content.decode()
    assert "laptop" in content
    assert "bobs-secret-box" not in content
    assert "never used" in content


def test_tokens_page_makes_a_token_and_shows_it_once(client, owner: User) -> None:
    client.force_login(owner)
    response = client.post(TOKENS, {"name": "build box"})
    assert response.status_code == 200
    token = ApiToken.objects.get(user=owner)
    raw = response.context["new_token_raw"]
    assert token.prefix == raw[:8] and token.name == "build box"
    assert f'value="{raw}"' in response.content.decode()
    assert raw not in client.get(TOKENS).content.decode()
    me = client.get("/api/auth/me", HTTP_AUTHORIZATION=f"Token {raw}")
    assert me.status_code == 200


def test_tokens_page_revokes_a_token(client, owner: User) -> None:
    token, raw = api_token_create(user=owner, name="old laptop")
    client.force_login(owner)
    page = client.get(TOKENS).content.decode()
    revoke_url = reverse("accounts:token_revoke", args=[token.pk])
    assert f'action="{revoke_url}"' in page
    assert client.get(revoke_url).status_code == 405
    response = client.post(revoke_url)
    assert response.status_code == 302
    assert response["Location"] == TOKENS
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert "Token “old laptop” revoked" in client.get(TOKENS).content.decode()
    assert client.get("/api/auth/me", HTTP_AUTHORIZATION=f"Token {raw}").status_code == 401


def test_revoking_another_users_token_on_the_page_is_a_404(client, owner: User, other_user: User) -> None:
    token, _ = api_token_create(user=other_user, name="bob's")
    client.force_login(owner)
    response = client.post(reverse("accounts:token_revoke", args=[token.pk]))
    assert response.status_code == 404
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_register_names_a_weak_password_and_a_taken_email_together(client, owner: User) -> None:
    response = client.post(REGISTER, register_data(email=owner.email, password="password", password_confirm="password"))
    assert response.status_code == 400
    html = response.content.decode()
    # Both at once: fixing the password must not only then reveal the email was taken.
    assert EMAIL_TAKEN in html
    assert "This password is too common." in html
