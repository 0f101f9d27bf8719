"""REST API: registration, login, logout, tokens, and the auth rate limit."""

from __future__ import annotations

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from accounts.models import ApiToken, User, hash_token
from accounts.services import EMAIL_TAKEN, INVALID_CREDENTIALS, RATE_LIMITED
from projects.models import DEFAULT_PROJECT_NAME, Project
from tests.api_helpers import assert_error, csrf_headers
from tests.factories import DEFAULT_PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

REGISTER = "/api/auth/register"
LOGIN = "/api/auth/login"
LOGOUT = "/api/auth/logout"
TOKEN = "/api/auth/token"
ME = "/api/auth/me"
LIMIT = settings.AUTH_RATE_LIMIT_ATTEMPTS


# --- register ---------------------------------------------------------------------------


def test_register_creates_the_user_with_a_project_and_logs_the_session_in() -> None:
    client = APIClient(enforce_csrf_checks=True)  # a script: no CSRF token needed
    response = client.post(
        REGISTER, {"email": " New.User@Example.COM ", "password": "long enough", "display_name": " New "}, format="json"
    )
    assert response.status_code == 201, response.content
    user = User.objects.get()
    assert response.json() == {"id": user.pk, "email": "new.user@example.com", "display_name": "New"}
    assert user.check_password("long enough")
    assert list(Project.objects.filter(owner=user).values_list("name", flat=True)) == [DEFAULT_PROJECT_NAME]
    me = client.get(ME)
    assert me.status_code == 200
    assert me.json()["email"] == "new.user@example.com"


def test_register_without_display_name() -> None:
    response = APIClient().post(REGISTER, {"email": "a@example.com", "password": "12345678"}, format="json")
    assert response.status_code == 201
    assert response.json()["display_name"] == ""


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"email": "not-an-email", "password": "long enough"}, "email"),
        ({"email": "", "password": "long enough"}, "email"),
        ({"password": "long enough"}, "email"),
        ({"email": 42, "password": "long enough"}, "email"),
        ({"email": "a@example.com", "password": "short77"}, "password"),
        ({"email": "a@example.com", "password": "x" * 129}, "password"),
        ({"email": "a@example.com", "password": 123456789}, "password"),
        ({"email": "a@example.com"}, "password"),
        ({"email": "a@example.com", "password": "long\x00enough"}, "password"),
        ({"email": "a@example.com", "password": "long enough", "display_name": "x" * 101}, "display_name"),
        ({"email": "a@example.com", "password": "long enough", "display_name": ["x"]}, "display_name"),
    ],
)
def test_register_rejects_invalid_input(anon_client: APIClient, body: dict, field: str) -> None:
    response = anon_client.post(REGISTER, body, format="json")
    body = assert_error(response, 400, "invalid")
    assert list(body["extra"]["fields"]) == [field]
    assert not User.objects.exists()


def test_register_accepts_the_longest_password(anon_client: APIClient) -> None:
    response = anon_client.post(REGISTER, {"email": "a@example.com", "password": "x" * 128}, format="json")
    assert response.status_code == 201


def test_register_with_a_taken_email_is_a_conflict(anon_client: APIClient, owner: User) -> None:
    response = anon_client.post(REGISTER, {"email": "ALICE@example.com", "password": "long enough"}, format="json")
    assert_error(response, 409, "email_taken", EMAIL_TAKEN)
    assert User.objects.count() == 1
    assert "sessionid" not in response.cookies


# --- login -------------------------------------------------------------------------------


def test_login_starts_a_session_that_works_with_csrf(owner: User) -> None:
    client = APIClient(enforce_csrf_checks=True)
    response = client.post(LOGIN, {"email": "Alice@Example.com", "password": DEFAULT_PASSWORD}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"id": owner.pk, "email": owner.email, "display_name": ""}
    assert response.cookies[settings.SESSION_COOKIE_NAME].value
    # login() rotates the CSRF token: the browser (or script) gets the cookie to echo.
    csrf = response.cookies[settings.CSRF_COOKIE_NAME].value
    assert csrf
    refused = client.post("/api/projects", {"name": "No token"}, format="json")
    assert_error(refused, 403, "permission_denied")
    created = client.post("/api/projects", {"name": "With token"}, format="json", HTTP_X_CSRFTOKEN=csrf)
    assert created.status_code == 201, created.content
    assert Project.objects.filter(owner=owner, name="With token").exists()


@pytest.mark.parametrize(
    "body",
    [
        {"email": "alice@example.com", "password": "wrong password"},
        {"email": "nobody@example.com", "password": DEFAULT_PASSWORD},
        {"email": "not an email", "password": DEFAULT_PASSWORD},
        {"email": "alice@example.com", "password": DEFAULT_PASSWORD.upper()},
    ],
)
def test_every_login_failure_reads_the_same(anon_client: APIClient, owner: User, body: dict) -> None:
    response = anon_client.post(LOGIN, body, format="json")
    assert_error(response, 401, "authentication_failed", INVALID_CREDENTIALS)
    assert settings.SESSION_COOKIE_NAME not in response.cookies


def test_an_inactive_user_cannot_log_in(anon_client: APIClient, owner: User) -> None:
    owner.is_active = False
    owner.save()
    response = anon_client.post(LOGIN, {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json")
    assert_error(response, 401, "authentication_failed", INVALID_CREDENTIALS)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"email": "alice@example.com"}, "password"),
        ({"password": DEFAULT_PASSWORD}, "email"),
        ({"email": ["alice@example.com"], "password": DEFAULT_PASSWORD}, "email"),
        ({"email": "alice@example.com", "password": None}, "password"),
    ],
)
def test_login_with_an_incomplete_body_is_a_400(anon_client: APIClient, owner: User, body: dict, field: str) -> None:
    response = anon_client.post(LOGIN, body, format="json")
    assert list(assert_error(response, 400, "invalid")["extra"]["fields"]) == [field]


def test_login_ignores_a_bad_authorization_header(owner: User) -> None:
    client = APIClient(HTTP_AUTHORIZATION="Token not-a-token")
    response = client.post(LOGIN, {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json")
    assert response.status_code == 200


def test_login_with_a_trailing_slash(anon_client: APIClient, owner: User) -> None:
    response = anon_client.post(LOGIN + "/", {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json")
    assert response.status_code == 200
    assert response.json()["id"] == owner.pk


# --- logout ------------------------------------------------------------------------------


def test_logout_ends_the_session(owner_session_client: APIClient) -> None:
    assert owner_session_client.get(ME).status_code == 200
    response = owner_session_client.post(LOGOUT, **csrf_headers(owner_session_client))
    assert response.status_code == 204
    assert response.content == b""
    assert_error(owner_session_client.get(ME), 401, "not_authenticated")


def test_logout_through_the_session_needs_the_csrf_token(owner_session_client: APIClient) -> None:
    assert_error(owner_session_client.post(LOGOUT), 403, "permission_denied")
    assert owner_session_client.get(ME).status_code == 200


def test_logout_with_a_token_leaves_the_token_valid(owner_client: APIClient) -> None:
    assert owner_client.post(LOGOUT).status_code == 204
    assert owner_client.get(ME).status_code == 200


def test_logout_needs_authentication(anon_client: APIClient) -> None:
    response = anon_client.post(LOGOUT)
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


# --- tokens ------------------------------------------------------------------------------


def test_token_is_made_once_and_authenticates(anon_client: APIClient, owner: User) -> None:
    response = anon_client.post(
        TOKEN, {"email": owner.email, "password": DEFAULT_PASSWORD, "name": " ci "}, format="json"
    )
    assert response.status_code == 201, response.content
    assert set(response.json()) == {"token"}
    raw = response.json()["token"]
    token = ApiToken.objects.get(user=owner)
    assert token.name == "ci"
    assert token.digest == hash_token(raw)
    assert token.prefix == raw[:8]
    assert raw not in (token.digest, token.name)
    client = APIClient(HTTP_AUTHORIZATION=f"Token {raw}")
    me = client.get(ME)
    assert me.status_code == 200
    assert me.json()["id"] == owner.pk


def test_token_with_wrong_credentials(anon_client: APIClient, owner: User) -> None:
    response = anon_client.post(TOKEN, {"email": owner.email, "password": "nope nope"}, format="json")
    assert_error(response, 401, "authentication_failed", INVALID_CREDENTIALS)
    assert not ApiToken.objects.exists()


def test_token_name_too_long(anon_client: APIClient, owner: User) -> None:
    response = anon_client.post(
        TOKEN, {"email": owner.email, "password": DEFAULT_PASSWORD, "name": "x" * 101}, format="json"
    )
    assert list(assert_error(response, 400, "invalid")["extra"]["fields"]) == ["name"]


@pytest.mark.parametrize("header", ["Token nope", "Token", "Token a b", "token \xff\xfe"])
def test_a_bad_token_is_a_401(owner: User, header: str) -> None:
    client = APIClient(HTTP_AUTHORIZATION=header)
    assert_error(client.get(ME), 401, "authentication_failed")


# --- me and personas --------------------------------------------------------------------


def test_me(owner_client: APIClient, owner_session_client: APIClient, anon_client: APIClient, owner: User) -> None:
    expected = {"id": owner.pk, "email": owner.email, "display_name": ""}
    assert owner_client.get(ME).json() == expected
    assert owner_session_client.get(ME).json() == expected
    assert_error(anon_client.get(ME), 401, "not_authenticated")


def test_an_inactive_users_token_stops_working(owner_client: APIClient, owner: User) -> None:
    owner.is_active = False
    owner.save()
    assert_error(owner_client.get(ME), 401, "authentication_failed")


# --- rate limit --------------------------------------------------------------------------

ENDPOINT_BODIES = {
    LOGIN: lambda email: {"email": email, "password": "wrong password"},
    TOKEN: lambda email: {"email": email, "password": "wrong password"},
    REGISTER: lambda email: {"email": email, "password": "long enough"},
}


@pytest.mark.parametrize("url", list(ENDPOINT_BODIES))
def test_the_eleventh_attempt_from_one_address_is_refused(anon_client: APIClient, url: str) -> None:
    body = ENDPOINT_BODIES[url]
    for attempt in range(LIMIT):
        response = anon_client.post(url, body(f"user{attempt}@example.com"), format="json", REMOTE_ADDR="10.0.0.1")
        assert response.status_code != 429
    refused = anon_client.post(url, body("fresh@example.com"), format="json", REMOTE_ADDR="10.0.0.1")
    body_json = assert_error(refused, 429, "rate_limited", RATE_LIMITED)
    retry_after = int(refused["Retry-After"])
    assert 1 <= retry_after <= settings.AUTH_RATE_LIMIT_WINDOW_SECONDS
    assert body_json["extra"] == {"retry_after": retry_after}
    # Another address is not affected.
    other = anon_client.post(url, body("fresh@example.com"), format="json", REMOTE_ADDR="10.0.0.2")
    assert other.status_code != 429


@pytest.mark.parametrize("url", list(ENDPOINT_BODIES))
def test_the_eleventh_attempt_for_one_email_is_refused(anon_client: APIClient, url: str) -> None:
    body = ENDPOINT_BODIES[url]
    for attempt in range(LIMIT):
        response = anon_client.post(url, body("Target@example.com"), format="json", REMOTE_ADDR=f"10.0.1.{attempt}")
        assert response.status_code != 429
    # The email is compared normalised: case and spaces do not dodge the limit.
    refused = anon_client.post(url, body(" target@EXAMPLE.com"), format="json", REMOTE_ADDR="10.0.2.1")
    assert_error(refused, 429, "rate_limited", RATE_LIMITED)
    assert refused["Retry-After"]


def test_the_limit_holds_even_for_the_right_password(anon_client: APIClient, owner: User) -> None:
    for _ in range(LIMIT):
        anon_client.post(LOGIN, {"email": owner.email, "password": "wrong password"}, format="json")
    response = anon_client.post(LOGIN, {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json")
    assert_error(response, 429, "rate_limited")
    assert settings.SESSION_COOKIE_NAME not in response.cookies


def test_bodies_without_an_email_are_not_counted(anon_client: APIClient, owner: User) -> None:
    for body in [{}, {"password": "x"}, {"email": 5}, {"email": "   "}, ["not", "a", "dict"]] * 3:
        assert anon_client.post(LOGIN, body, format="json").status_code == 400
    response = anon_client.post(LOGIN, {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json")
    assert response.status_code == 200


def test_login_and_register_are_counted_separately(anon_client: APIClient) -> None:
    user = UserFactory(email="carol@example.com")
    for _ in range(LIMIT):
        anon_client.post(REGISTER, {"email": user.email, "password": "long enough"}, format="json")
    response = anon_client.post(LOGIN, {"email": user.email, "password": DEFAULT_PASSWORD}, format="json")
    assert response.status_code == 200


def test_an_unreachable_rate_limiter_refuses_sign_in_with_503_not_500(anon_client: APIClient, monkeypatch) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    from accounts import services

    def cache_down(*args: object, **kwargs: object) -> None:
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(services.cache, "add", cache_down)
    response = anon_client.post(TOKEN, {"email": "a@example.com", "password": "whatever"}, format="json")
    assert response.status_code == 503
    assert response.json()["code"] == "rate_limiter_unavailable"
    assert response.json()["message"] == services.RATE_LIMITER_UNAVAILABLE
    assert response["Retry-After"] == "5"
