"""REST API: registration, login, logout, tokens, and the auth rate limit."""

from __future__ import annotations

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from accounts.models import ApiToken, User, hash_token
from accounts.services import (
    BACKING_OFF,
    EMAIL_TAKEN,
    INVALID_CREDENTIALS,
    RATE_LIMITED,
    TOKEN_EXPIRED,
    TOKEN_INVALID,
    WRONG_CURRENT_PASSWORD,
    api_token_create,
)
from projects.models import DEFAULT_PROJECT_NAME, Project
from tests.api_helpers import assert_error, csrf_headers, field_errors
from tests.factories import DEFAULT_PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

REGISTER = "/api/auth/register"
LOGIN = "/api/auth/login"
LOGOUT = "/api/auth/logout"
TOKEN = "/api/auth/token"
ME = "/api/auth/me"
PASSWORD = "/api/auth/password"
TOKENS = "/api/auth/tokens"
LIMIT = settings.AUTH_RATE_LIMIT_ATTEMPTS
ADDRESS_LIMIT = settings.AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS
BACKOFF_AFTER = settings.AUTH_BACKOFF_AFTER_FAILURES
NEW_PASSWORD = "a brand new passphrase"


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
    response = APIClient().post(REGISTER, {"email": "a@example.com", "password": "long enough"}, format="json")
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


ADDRESS_LIMITS = {LOGIN: ADDRESS_LIMIT, TOKEN: ADDRESS_LIMIT, REGISTER: LIMIT}


@pytest.mark.parametrize("url", list(ENDPOINT_BODIES))
def test_one_attempt_past_the_limit_from_one_address_is_refused(anon_client: APIClient, url: str) -> None:
    body = ENDPOINT_BODIES[url]
    for attempt in range(ADDRESS_LIMITS[url]):
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


@pytest.mark.parametrize("url", [LOGIN, TOKEN])
def test_the_eleventh_attempt_for_one_email_from_one_address_is_refused(
    anon_client: APIClient, url: str, settings
) -> None:
    settings.AUTH_BACKOFF_AFTER_FAILURES = 1000  # the window alone, without the backoff
    body = ENDPOINT_BODIES[url]
    for _ in range(LIMIT):
        response = anon_client.post(url, body("Target@example.com"), format="json", REMOTE_ADDR="10.0.1.1")
        assert response.status_code == 401
    # The email is compared normalised: case and spaces do not dodge the limit.
    refused = anon_client.post(url, body(" target@EXAMPLE.com"), format="json", REMOTE_ADDR="10.0.1.1")
    assert_error(refused, 429, "rate_limited", RATE_LIMITED)
    assert refused["Retry-After"]
    # The same address may still try other emails, and other addresses this one.
    assert anon_client.post(url, body("other@example.com"), format="json", REMOTE_ADDR="10.0.1.1").status_code == 401
    assert anon_client.post(url, body("target@example.com"), format="json", REMOTE_ADDR="10.0.1.2").status_code == 401


def test_registration_is_limited_per_address_not_per_email(anon_client: APIClient) -> None:
    for attempt in range(LIMIT + 2):
        response = anon_client.post(
            REGISTER,
            {"email": "same@example.com", "password": "long enough"},
            format="json",
            REMOTE_ADDR=f"10.0.3.{attempt}",
        )
        assert response.status_code in (201, 409)


def test_a_failing_address_is_held_back_even_with_the_right_password(anon_client: APIClient, owner: User) -> None:
    for _ in range(BACKOFF_AFTER):
        response = anon_client.post(
            LOGIN, {"email": owner.email, "password": "wrong password"}, format="json", REMOTE_ADDR="10.0.4.1"
        )
        assert_error(response, 401, "authentication_failed", INVALID_CREDENTIALS)
    response = anon_client.post(
        LOGIN, {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json", REMOTE_ADDR="10.0.4.1"
    )
    body = assert_error(response, 429, "rate_limited", BACKING_OFF)
    assert response["Retry-After"] == "1" == str(body["extra"]["retry_after"])
    assert settings.SESSION_COOKIE_NAME not in response.cookies


@pytest.mark.parametrize("url", [LOGIN, TOKEN])
def test_the_owner_is_not_locked_out_by_guesses_from_elsewhere(anon_client: APIClient, owner: User, url: str) -> None:
    wrong = {"email": owner.email, "password": "wrong password"}
    # More guesses than any limit, from one address and from many.
    for attempt in range(LIMIT + 5):
        anon_client.post(url, wrong, format="json", REMOTE_ADDR="203.0.113.9")
        assert anon_client.post(url, wrong, format="json", REMOTE_ADDR=f"198.51.100.{attempt}").status_code == 401
    assert anon_client.post(url, wrong, format="json", REMOTE_ADDR="203.0.113.9").status_code == 429
    # The owner, from an address that has not failed, gets in at once.
    response = anon_client.post(
        url, {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json", REMOTE_ADDR="192.0.2.44"
    )
    assert response.status_code in (200, 201), response.content


def test_the_login_page_and_the_token_api_share_the_count(client, anon_client: APIClient, owner: User) -> None:
    for _ in range(BACKOFF_AFTER):
        page = client.post(
            "/accounts/login", {"email": owner.email, "password": "wrong password"}, REMOTE_ADDR="10.0.5.1"
        )
        assert page.status_code == 400
    response = anon_client.post(
        TOKEN, {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json", REMOTE_ADDR="10.0.5.1"
    )
    assert_error(response, 429, "rate_limited", BACKING_OFF)
    assert not ApiToken.objects.exists()


def test_a_forwarded_address_from_an_untrusted_peer_does_not_dodge_the_limit(anon_client: APIClient, settings) -> None:
    settings.TRUSTED_PROXIES = []
    body = ENDPOINT_BODIES[LOGIN]
    for attempt in range(ADDRESS_LIMIT):
        response = anon_client.post(
            LOGIN,
            body(f"user{attempt}@example.com"),
            format="json",
            REMOTE_ADDR="10.0.6.1",
            HTTP_X_FORWARDED_FOR=f"192.0.2.{attempt}",
        )
        assert response.status_code == 401
    refused = anon_client.post(
        LOGIN, body("fresh@example.com"), format="json", REMOTE_ADDR="10.0.6.1", HTTP_X_FORWARDED_FOR="192.0.2.200"
    )
    assert_error(refused, 429, "rate_limited", RATE_LIMITED)


def test_registration_behind_a_spoofed_forwarded_address_is_still_limited(anon_client: APIClient) -> None:
    for attempt in range(LIMIT):
        response = anon_client.post(
            REGISTER,
            {"email": f"new{attempt}@example.com", "password": "long enough"},
            format="json",
            REMOTE_ADDR="10.0.7.1",
            HTTP_X_FORWARDED_FOR=f"192.0.2.{attempt}",
        )
        assert response.status_code == 201
    refused = anon_client.post(
        REGISTER,
        {"email": "one.more@example.com", "password": "long enough"},
        format="json",
        REMOTE_ADDR="10.0.7.1",
        HTTP_X_FORWARDED_FOR="192.0.2.99",
    )
    assert_error(refused, 429, "rate_limited", RATE_LIMITED)
    assert User.objects.count() == LIMIT


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(anon_client: APIClient, settings) -> None:
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    body = ENDPOINT_BODIES[LOGIN]

    def through_proxy(email: str, forwarded: str):
        return anon_client.post(
            LOGIN, body(email), format="json", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR=forwarded
        )

    # The client made up the left-most entry; the proxy appended what it saw.
    for attempt in range(ADDRESS_LIMIT):
        assert through_proxy(f"user{attempt}@example.com", f"192.0.2.{attempt}, 203.0.113.7").status_code == 401
    assert_error(through_proxy("fresh@example.com", "203.0.113.7"), 429, "rate_limited", RATE_LIMITED)
    # Another client behind the same proxy has a count of its own.
    assert through_proxy("fresh@example.com", "203.0.113.8").status_code == 401


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


# --- password rules ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("password", "This password is too common."),
        ("12345678", "This password is too common."),
        ("83920174", "This password is entirely numeric."),
        (" " * 8, "This password needs at least 8 characters other than spaces."),
        (" " * 7 + "x", "This password needs at least 8 characters other than spaces."),
        ("carol.tester@example.com", "The password is too similar to the email address."),
    ],
)
def test_register_refuses_weak_passwords_with_a_field_error(
    anon_client: APIClient, password: str, message: str
) -> None:
    response = anon_client.post(REGISTER, {"email": "carol.tester@example.com", "password": password}, format="json")
    errors = field_errors(response)
    assert list(errors) == ["password"]
    assert message in errors["password"]
    assert not User.objects.exists()


# --- password change -----------------------------------------------------------------------


def test_password_change_keeps_this_session_and_ends_the_others(owner: User) -> None:
    this, other = APIClient(enforce_csrf_checks=True), APIClient()
    this.force_login(owner)
    other.force_login(owner)
    _, raw = api_token_create(user=owner, name="ci")
    token_client = APIClient(HTTP_AUTHORIZATION=f"Token {raw}")
    assert token_client.get(ME).status_code == 200

    response = this.post(
        PASSWORD,
        {"current_password": DEFAULT_PASSWORD, "new_password": NEW_PASSWORD},
        format="json",
        **csrf_headers(this),
    )
    assert response.status_code == 204, response.content
    owner.refresh_from_db()
    assert owner.check_password(NEW_PASSWORD)
    assert this.get(ME).status_code == 200
    assert_error(other.get(ME), 401, "not_authenticated")
    # Tokens made before the change are revoked.
    assert_error(token_client.get(ME), 401, "authentication_failed", TOKEN_INVALID)
    assert not ApiToken.objects.filter(user=owner).exists()
    # Only the new password logs in now.
    old = APIClient().post(LOGIN, {"email": owner.email, "password": DEFAULT_PASSWORD}, format="json")
    assert old.status_code == 401
    new = APIClient().post(LOGIN, {"email": owner.email, "password": NEW_PASSWORD}, format="json")
    assert new.status_code == 200


def test_password_change_with_a_token_keeps_that_token(owner_client: APIClient, owner: User) -> None:
    api_token_create(user=owner, name="another")
    response = owner_client.post(
        PASSWORD, {"current_password": DEFAULT_PASSWORD, "new_password": NEW_PASSWORD}, format="json"
    )
    assert response.status_code == 204
    assert owner_client.get(ME).status_code == 200
    assert list(ApiToken.objects.filter(user=owner).values_list("name", flat=True)) == ["tests"]
    assert "sessionid" not in response.cookies


def test_password_change_needs_the_current_password(owner_client: APIClient, owner: User) -> None:
    response = owner_client.post(
        PASSWORD, {"current_password": "not my password", "new_password": NEW_PASSWORD}, format="json"
    )
    assert field_errors(response) == {"current_password": [WRONG_CURRENT_PASSWORD]}
    owner.refresh_from_db()
    assert owner.check_password(DEFAULT_PASSWORD)


def test_guessing_the_current_password_is_throttled_like_a_login(owner_client: APIClient, owner: User) -> None:
    for _ in range(BACKOFF_AFTER):
        response = owner_client.post(
            PASSWORD, {"current_password": "a guess", "new_password": NEW_PASSWORD}, format="json"
        )
        assert response.status_code == 400
    response = owner_client.post(
        PASSWORD, {"current_password": DEFAULT_PASSWORD, "new_password": NEW_PASSWORD}, format="json"
    )
    assert_error(response, 429, "rate_limited", BACKING_OFF)
    assert response["Retry-After"] == "1"


@pytest.mark.parametrize(
    ("new_password", "message"),
    [
        ("password", "This password is too common."),
        ("12345678", "This password is too common."),
        (" " * 8, "This password needs at least 8 characters other than spaces."),
        ("short", "Ensure this field has at least 8 characters."),
    ],
)
def test_password_change_validates_the_new_password(
    owner_client: APIClient, owner: User, new_password: str, message: str
) -> None:
    response = owner_client.post(
        PASSWORD, {"current_password": DEFAULT_PASSWORD, "new_password": new_password}, format="json"
    )
    errors = field_errors(response)
    assert list(errors) == ["new_password"]
    assert message in errors["new_password"]
    owner.refresh_from_db()
    assert owner.check_password(DEFAULT_PASSWORD)


def test_password_change_needs_authentication(anon_client: APIClient) -> None:
    response = anon_client.post(PASSWORD, {"current_password": "x", "new_password": NEW_PASSWORD}, format="json")
    assert_error(response, 401, "not_authenticated")


# --- listing and revoking tokens -------------------------------------------------------------


def test_tokens_lists_only_your_own_and_marks_the_current_one(
    owner_client: APIClient, owner: User, other_user: User, django_assert_num_queries
) -> None:
    api_token_create(user=owner, name="laptop")
    api_token_create(user=owner, name="ci")
    api_token_create(user=other_user, name="bob's")
    assert owner_client.get(ME).status_code == 200  # records last use: the next request does not write
    with django_assert_num_queries(2):  # the token, the list
        response = owner_client.get(TOKENS)
    assert response.status_code == 200
    rows = response.json()
    assert [row["name"] for row in rows] == ["ci", "laptop", "tests"]
    assert [row["current"] for row in rows] == [False, False, True]
    assert set(rows[0]) == {"id", "name", "prefix", "created_at", "last_used_at", "expires_at", "current"}
    assert rows[0]["expires_at"] is None and rows[0]["last_used_at"] is None
    assert rows[2]["last_used_at"] is not None
    assert "digest" not in response.content.decode()


def test_revoking_a_token_stops_it_at_once(owner_client: APIClient, owner: User) -> None:
    token, raw = api_token_create(user=owner, name="old laptop")
    revoked_client = APIClient(HTTP_AUTHORIZATION=f"Token {raw}")
    assert revoked_client.get(ME).status_code == 200
    response = owner_client.delete(f"{TOKENS}/{token.pk}")
    assert response.status_code == 204
    assert_error(revoked_client.get(ME), 401, "authentication_failed", TOKEN_INVALID)
    assert owner_client.get(ME).status_code == 200


def test_revoking_another_users_token_is_a_404(owner_client: APIClient, other_user: User) -> None:
    token, raw = api_token_create(user=other_user, name="bob's")
    assert_error(owner_client.delete(f"{TOKENS}/{token.pk}"), 404, "not_found")
    assert_error(owner_client.delete(f"{TOKENS}/not-an-id"), 404, "not_found")
    assert_error(owner_client.delete(f"{TOKENS}/999999"), 404, "not_found")
    assert APIClient(HTTP_AUTHORIZATION=f"Token {raw}").get(ME).status_code == 200


def test_tokens_need_authentication(anon_client: APIClient, owner: User) -> None:
    token, _ = api_token_create(user=owner)
    assert_error(anon_client.get(TOKENS), 401, "not_authenticated")
    assert_error(anon_client.delete(f"{TOKENS}/{token.pk}"), 401, "not_authenticated")
    assert ApiToken.objects.filter(pk=token.pk).exists()


# --- token expiry ------------------------------------------------------------------------------


def test_an_expired_token_is_refused_saying_so(owner: User, settings) -> None:
    from datetime import timedelta

    from django.utils import timezone

    settings.API_TOKEN_TTL_DAYS = 30
    old, old_raw = api_token_create(user=owner, name="old")
    ApiToken.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=30, seconds=1))
    _, fresh_raw = api_token_create(user=owner, name="fresh")

    response = APIClient(HTTP_AUTHORIZATION=f"Token {old_raw}").get(ME)
    assert_error(response, 401, "token_expired", TOKEN_EXPIRED)
    assert response["WWW-Authenticate"] == "Token"
    fresh = APIClient(HTTP_AUTHORIZATION=f"Token {fresh_raw}")
    assert fresh.get(ME).status_code == 200
    rows = {row["name"]: row for row in fresh.get(TOKENS).json()}
    assert rows["old"]["expires_at"] is not None

    # 0 = never: the same token works again.
    settings.API_TOKEN_TTL_DAYS = 0
    assert APIClient(HTTP_AUTHORIZATION=f"Token {old_raw}").get(ME).status_code == 200
