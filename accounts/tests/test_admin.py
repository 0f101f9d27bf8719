"""Django admin: users (email login) and API tokens."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken, User
from accounts.services import BACKING_OFF, RATE_LIMITED, api_token_create
from projects.models import DEFAULT_PROJECT_NAME, Project
from tests.factories import ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser() -> User:
    return User.objects.create_superuser(email="root@example.com", password="root password")


@pytest.fixture
def operator(client: Client, superuser: User) -> Client:
    client.force_login(superuser)
    return client


def test_user_changelist_shows_columns_and_links_to_projects(operator: Client, owner: User) -> None:
    ProjectFactory.create_batch(2, owner=owner)
    response = operator.get(reverse("admin:accounts_user_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    for column in ("Email address", "Display name", "Is staff", "Is active", "Date joined", "Projects"):
        assert column in html
    projects_url = reverse("admin:projects_project_changelist")
    assert f'href="{projects_url}?owner__id__exact={owner.pk}">2</a>' in html
    # The link narrows the project list to that user's projects.
    projects = operator.get(f"{projects_url}?owner__id__exact={owner.pk}")
    assert projects.status_code == 200
    assert list(projects.context["cl"].result_list) == list(Project.objects.filter(owner=owner))


def test_user_search_and_filters(operator: Client, owner: User, other_user: User) -> None:
    url = reverse("admin:accounts_user_changelist")
    found = operator.get(url, {"q": "alice"})
    assert [user.email for user in found.context["cl"].result_list] == ["alice@example.com"]
    staff = operator.get(url, {"is_staff__exact": "1"})
    assert [user.email for user in staff.context["cl"].result_list] == ["root@example.com"]


def test_user_change_page_lists_tokens_without_raw_values(operator: Client, owner: User) -> None:
    token, raw = api_token_create(user=owner, name="laptop")
    response = operator.get(reverse("admin:accounts_user_change", args=[owner.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "laptop" in html
    assert token.prefix in html
    assert raw not in html
    assert token.digest not in html


def test_user_change_form_saves(operator: Client, owner: User) -> None:
    url = reverse("admin:accounts_user_change", args=[owner.pk])
    response = operator.post(
        url,
        {
            "email": "Alice@Example.com",
            "display_name": "Alice",
            "is_active": "on",
            "api_tokens-TOTAL_FORMS": "0",
            "api_tokens-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else ""
    owner.refresh_from_db()
    assert (owner.email, owner.display_name, owner.is_active) == ("alice@example.com", "Alice", True)
    assert owner.check_password("correct horse battery")


def test_user_add_page_creates_a_user_with_a_hashed_password(operator: Client) -> None:
    url = reverse("admin:accounts_user_add")
    page = operator.get(url)
    assert page.status_code == 200
    assert 'name="email"' in page.content.decode()
    assert 'name="username"' not in page.content.decode()
    response = operator.post(
        url,
        {
            "email": "New.Operator@Example.com",
            "display_name": "Newbie",
            "usable_password": "true",
            "password1": "a fine password 42",
            "password2": "a fine password 42",
        },
    )
    assert response.status_code == 302
    user = User.objects.get(email="new.operator@example.com")
    assert response["Location"] == reverse("admin:accounts_user_change", args=[user.pk])
    assert user.display_name == "Newbie"
    assert user.password != "a fine password 42"
    assert user.password.startswith("md5$")  # hashed (the test settings use the fast hasher)
    assert user.check_password("a fine password 42")
    assert not user.is_staff
    assert list(Project.objects.filter(owner=user).values_list("name", flat=True)) == [DEFAULT_PROJECT_NAME]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"email": "ALICE@example.com", "password1": "a fine password 42", "password2": "a fine password 42"}, "email"),
        ({"email": "not an email", "password1": "a fine password 42", "password2": "a fine password 42"}, "email"),
        ({"email": "x@example.com", "password1": "a fine password 42", "password2": "different 42"}, "password2"),
        ({"email": "x@example.com", "password1": "short", "password2": "short"}, "password2"),
    ],
)
def test_user_add_form_errors(operator: Client, owner: User, data: dict, field: str) -> None:
    response = operator.post(reverse("admin:accounts_user_add"), {"usable_password": "true", **data})
    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert User.objects.count() == 2  # root and alice


def test_user_password_change_page(operator: Client, owner: User) -> None:
    url = reverse("admin:auth_user_password_change", args=[owner.pk])
    assert operator.get(url).status_code == 200
    response = operator.post(
        url, {"password1": "brand new password", "password2": "brand new password", "usable_password": "true"}
    )
    assert response.status_code == 302
    owner.refresh_from_db()
    assert owner.check_password("brand new password")


def test_token_changelist_and_read_only_change_page(operator: Client, owner: User) -> None:
    token, raw = api_token_create(user=owner, name="ci")
    listing = operator.get(reverse("admin:accounts_apitoken_changelist"))
    assert listing.status_code == 200
    html = listing.content.decode()
    assert token.prefix in html
    assert reverse("admin:accounts_user_change", args=[owner.pk]) in html
    change = operator.get(reverse("admin:accounts_apitoken_change", args=[token.pk]))
    assert change.status_code == 200
    form = change.context["adminform"].form
    assert set(form.fields) == {"name"}  # user, prefix, digest and dates are read-only
    assert raw not in change.content.decode()
    digest = token.digest
    renamed = operator.post(
        reverse("admin:accounts_apitoken_change", args=[token.pk]), {"name": "renamed", "digest": "forged"}
    )
    assert renamed.status_code == 302
    token.refresh_from_db()
    assert (token.name, token.digest) == ("renamed", digest)


def test_tokens_cannot_be_added_in_the_admin(operator: Client) -> None:
    assert operator.get(reverse("admin:accounts_apitoken_add")).status_code == 403


def test_a_token_can_be_revoked(operator: Client, owner: User) -> None:
    token, _ = api_token_create(user=owner)
    response = operator.post(reverse("admin:accounts_apitoken_delete", args=[token.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert not ApiToken.objects.exists()


ADMIN_PAGES = [
    "admin:index",
    "admin:accounts_user_changelist",
    "admin:accounts_user_add",
    "admin:accounts_apitoken_changelist",
    "admin:projects_project_changelist",
    "admin:tasks_task_changelist",
    "admin:tasks_taskstatuschange_changelist",
]


@pytest.mark.parametrize("name", ADMIN_PAGES)
def test_non_staff_users_are_sent_to_the_admin_login(client: Client, name: str) -> None:
    client.force_login(UserFactory())
    url = reverse(name)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.parametrize("name", ADMIN_PAGES)
def test_anonymous_visitors_are_sent_to_the_admin_login(client: Client, name: str) -> None:
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


# --- The admin's sign-in shares the throttle -----------------------------------------------

ADMIN_LOGIN = "/admin/login/"


def admin_login(client: Client, email: str, password: str, address: str):  # type: ignore[no-untyped-def]
    return client.post(ADMIN_LOGIN, {"username": email, "password": password, "next": "/admin/"}, REMOTE_ADDR=address)


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def form_errors(response) -> list[str]:  # type: ignore[no-untyped-def]
    return list(response.context["form"].non_field_errors()) if response.context else []


def test_wrong_passwords_at_the_admin_are_throttled_then_even_the_right_one_waits(
    client: Client, superuser: User, settings
) -> None:
    answers = [admin_login(client, superuser.email, f"guess {n}", "10.9.0.1") for n in range(40)]
    assert all(answer.status_code == 200 and not logged_in(client) for answer in answers)
    refused = [answer for answer in answers if any(RATE_LIMITED in e or BACKING_OFF in e for e in form_errors(answer))]
    # Held back, as the API would be: at the latest past the address's attempts per window.
    assert len(refused) >= 40 - settings.AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS and refused[-1] is answers[-1]
    right = admin_login(client, superuser.email, "root password", "10.9.0.1")
    assert right.status_code == 200 and not logged_in(client)
    assert any("Wait" in error for error in form_errors(right)), form_errors(right)
    # The API answers the same address 429.
    api = Client().post(
        "/api/auth/login",
        {"email": superuser.email, "password": "root password"},
        content_type="application/json",
        REMOTE_ADDR="10.9.0.1",
    )
    assert api.status_code == 429
    # Another address that has not failed gets in: the owner is not locked out.
    assert admin_login(client, superuser.email, "root password", "10.9.0.2").status_code == 302
    assert logged_in(client)


def api_login(email: str, password: str, address: str):  # type: ignore[no-untyped-def]
    return Client().post(
        "/api/auth/login", {"email": email, "password": password}, content_type="application/json", REMOTE_ADDR=address
    )


# Failures from the address under test, then three more from addresses that had not
# failed (let through, counted against the email): the backoff then holds the address
# back for 2**3 = 8 s, long enough for the next attempt on a slow machine.
EXTRA_FAILURES = ["10.9.9.1", "10.9.9.2", "10.9.9.3"]


def test_failures_at_the_api_count_at_the_admin(client: Client, superuser: User, settings) -> None:
    addresses = ["10.9.1.1"] * settings.AUTH_BACKOFF_AFTER_FAILURES + EXTRA_FAILURES
    for address in addresses:
        assert api_login(superuser.email, "wrong password", address).status_code == 401
    right = admin_login(client, superuser.email, "root password", "10.9.1.1")
    assert not logged_in(client) and [BACKING_OFF in error for error in form_errors(right)] == [True]


def test_failures_at_the_admin_count_at_the_api(client: Client, superuser: User, settings) -> None:
    addresses = ["10.9.2.1"] * settings.AUTH_BACKOFF_AFTER_FAILURES + EXTRA_FAILURES
    for address in addresses:
        failed = admin_login(client, superuser.email, "wrong password", address)
        assert failed.status_code == 200 and "correct email" in " ".join(form_errors(failed)).lower()
    api = api_login(superuser.email, "root password", "10.9.2.1")
    assert api.status_code == 429 and api.json()["message"] == BACKING_OFF


def test_the_right_password_at_the_admin_still_signs_in_and_non_staff_are_refused(
    client: Client, superuser: User, owner: User
) -> None:
    from tests.factories import DEFAULT_PASSWORD

    refused = admin_login(client, owner.email, DEFAULT_PASSWORD, "10.9.3.1")
    assert refused.status_code == 200 and not logged_in(client) and form_errors(refused)
    assert admin_login(client, superuser.email, "root password", "10.9.3.1").status_code == 302
    assert logged_in(client)
