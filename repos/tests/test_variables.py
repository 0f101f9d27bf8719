"""A project's variables and secrets (repos/variables.py): validation without partial
writes, encryption at rest, the listing that never shows a secret, the API, the page,
the admin, and what the sandbox and the masker get."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.crypto import decrypt_secret
from core.masking import MASK
from repos import variables
from repos.models import ProjectVariable
from repos.variables import (
    NAME_INVALID,
    NAME_SANDBOX_OWNED,
    NAME_STARTUP,
    SECRET_TOO_SHORT,
    VALUE_TOO_LONG,
    VARIABLE_NOT_FOUND,
    project_sandbox_variables,
    project_variable_delete,
    project_variable_set,
    project_variables_list,
    secret_masker,
)

pytestmark = pytest.mark.django_db

TOKEN = "tok-live-8c1f2e9b"


def variables_url(project) -> str:  # type: ignore[no-untyped-def]
    return f"/api/projects/{project.pk}/repository/variables"


# --- The service --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["1ABC", "API-TOKEN", "A B", "É", "x" * 129, "A=B", "A\nB"])
def test_a_name_that_is_no_environment_variable_name_is_refused(project, name: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        project_variable_set(project=project, name=name, value="some value", secret=False)

    assert excinfo.value.message_dict == {"name": [NAME_INVALID]}
    assert not ProjectVariable.objects.exists()


@pytest.mark.parametrize("name", ["PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "LC_ALL", "PWD", "SHELL"])
def test_names_the_sandbox_sets_are_refused(project, name: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        project_variable_set(project=project, name=name, value="/somewhere", secret=False)

    assert excinfo.value.message_dict == {"name": [NAME_SANDBOX_OWNED.format(name=name)]}


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "GLIBC_TUNABLES"])
def test_names_that_change_how_programs_start_are_refused(project, name: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        project_variable_set(project=project, name=name, value="/tmp/x.so", secret=False)

    assert excinfo.value.message_dict == {"name": [NAME_STARTUP.format(name=name)]}


def test_a_secret_too_short_to_mask_is_refused_and_nothing_is_written(project) -> None:
    project_variable_set(project=project, name="PIN", value="old-value", secret=True)

    with pytest.raises(ValidationError) as excinfo:
        project_variable_set(project=project, name="PIN", value="123", secret=True)

    assert excinfo.value.message_dict == {"value": [SECRET_TOO_SHORT]}
    assert decrypt_secret(ProjectVariable.objects.get(name="PIN").value_encrypted) == "old-value"


def test_a_short_plain_value_is_allowed(project) -> None:
    project_variable_set(project=project, name="LEVEL", value="3", secret=False)

    assert project_sandbox_variables(project) == (("LEVEL", "3"),)


def test_both_fields_wrong_are_both_said(project) -> None:
    with pytest.raises(ValidationError) as excinfo:
        project_variable_set(project=project, name="PATH", value="x" * (variables.MAX_VALUE_LENGTH + 1), secret=False)

    assert set(excinfo.value.message_dict) == {"name", "value"}
    assert excinfo.value.message_dict["value"] == [VALUE_TOO_LONG]


def test_values_are_encrypted_at_rest_secret_or_not(project) -> None:
    project_variable_set(project=project, name="API_TOKEN", value=TOKEN, secret=True)
    project_variable_set(project=project, name="REGION", value="eu-west-1", secret=False)

    for row in ProjectVariable.objects.values("name", "value_encrypted"):
        assert TOKEN not in row["value_encrypted"] and "eu-west-1" not in row["value_encrypted"]
        assert row["value_encrypted"]
    assert decrypt_secret(ProjectVariable.objects.get(name="API_TOKEN").value_encrypted) == TOKEN


def test_setting_again_replaces_value_and_kind(project) -> None:
    project_variable_set(project=project, name="API_TOKEN", value=TOKEN, secret=True)
    project_variable_set(project=project, name="API_TOKEN", value="now-plain", secret=False)

    assert ProjectVariable.objects.count() == 1
    [listing] = project_variables_list(project=project)
    assert (listing.secret, listing.value) == (False, "now-plain")


def test_the_listing_never_holds_a_secret_value(project) -> None:
    project_variable_set(project=project, name="API_TOKEN", value=TOKEN, secret=True)
    project_variable_set(project=project, name="REGION", value="eu-west-1", secret=False)

    listed = {listing.name: listing for listing in project_variables_list(project=project)}

    assert listed["API_TOKEN"].value is None and listed["API_TOKEN"].secret
    assert listed["REGION"].value == "eu-west-1"


def test_sandbox_variables_and_masker(project, other_project) -> None:
    project_variable_set(project=project, name="API_TOKEN", value=TOKEN, secret=True)
    project_variable_set(project=project, name="REGION", value="eu-west-1", secret=False)
    project_variable_set(project=other_project, name="OTHER", value="other-secret", secret=True)

    assert project_sandbox_variables(project) == (("API_TOKEN", TOKEN), ("REGION", "eu-west-1"))
    masker = secret_masker(project)
    assert masker.mask(f"{TOKEN} eu-west-1 other-secret") == f"{MASK} eu-west-1 other-secret"


def test_a_value_that_no_longer_decrypts_is_left_out_of_the_sandbox(project) -> None:
    project_variable_set(project=project, name="API_TOKEN", value=TOKEN, secret=True)
    ProjectVariable.objects.update(value_encrypted="gAAAAA-not-a-token-of-this-key")

    assert project_sandbox_variables(project) == ()
    assert project_variables_list(project=project)[0].readable is False


def test_deleting_one_that_is_not_there_is_not_found(project) -> None:
    from core.exceptions import NotFound

    with pytest.raises(NotFound, match=VARIABLE_NOT_FOUND):
        project_variable_delete(project=project, name="NOPE")


# --- The API ------------------------------------------------------------------------


def test_api_set_list_and_delete(owner_client, project) -> None:  # type: ignore[no-untyped-def]
    response = owner_client.post(
        variables_url(project), {"name": "API_TOKEN", "value": TOKEN, "secret": True}, format="json"
    )
    assert response.status_code == 200, response.json()
    owner_client.post(variables_url(project), {"name": "REGION", "value": "eu-west-1", "secret": False}, format="json")

    listed = owner_client.get(variables_url(project))

    assert listed.status_code == 200
    assert TOKEN not in listed.content.decode()
    by_name = {item["name"]: item for item in listed.json()}
    assert by_name["API_TOKEN"]["saved"] is True and "value" not in by_name["API_TOKEN"]
    assert by_name["REGION"]["value"] == "eu-west-1" and by_name["REGION"]["secret"] is False
    assert TOKEN not in response.content.decode()

    deleted = owner_client.delete(f"{variables_url(project)}/API_TOKEN")
    assert deleted.status_code == 204
    assert [item["name"] for item in owner_client.get(variables_url(project)).json()] == ["REGION"]
    assert owner_client.delete(f"{variables_url(project)}/API_TOKEN").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "LD_PRELOAD", "value": "/x.so", "secret": False}, "name"),
        ({"name": "9LIVES", "value": "x", "secret": False}, "name"),
        ({"name": "PIN", "value": "12", "secret": True}, "value"),
        ({"name": "PIN", "value": 1234, "secret": True}, "value"),
        ({"value": "abcd"}, "name"),
    ],
)
def test_api_refuses_with_field_errors_and_writes_nothing(owner_client, project, body, field: str) -> None:  # type: ignore[no-untyped-def]
    response = owner_client.post(variables_url(project), body, format="json")

    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]
    assert not ProjectVariable.objects.exists()


def test_another_users_project_is_not_found(owner_client, other_client, project) -> None:  # type: ignore[no-untyped-def]
    project_variable_set(project=project, name="API_TOKEN", value=TOKEN, secret=True)

    assert other_client.get(variables_url(project)).status_code == 404
    posted = other_client.post(variables_url(project), {"name": "X_VAR", "value": "abcd"}, format="json")
    assert posted.status_code == 404
    assert other_client.delete(f"{variables_url(project)}/API_TOKEN").status_code == 404
    assert ProjectVariable.objects.count() == 1


def test_anonymous_is_refused(anon_client, project) -> None:  # type: ignore[no-untyped-def]
    assert anon_client.get(variables_url(project)).status_code in (401, 403)


def test_the_list_is_one_query(owner_client, project, django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    for number in range(5):
        project_variable_set(project=project, name=f"VAR_{number}", value=f"value-{number}", secret=bool(number % 2))
    with django_assert_max_num_queries(6):  # session, user, project, the variables
        assert len(owner_client.get(variables_url(project)).json()) == 5


# --- The page and the admin ---------------------------------------------------------


def test_the_page_sets_and_removes_and_never_shows_a_secret(client, owner, project) -> None:  # type: ignore[no-untyped-def]
    client.force_login(owner)
    page = f"/projects/{project.pk}/repository"

    saved = client.post(f"{page}/variables", {"name": "API_TOKEN", "value": TOKEN, "secret": "on"})
    assert saved.status_code == 302
    client.post(f"{page}/variables", {"name": "REGION", "value": "eu-west-1"})
    shown = client.get(page).content.decode()

    assert "API_TOKEN" in shown and "Secret, saved" in shown and "eu-west-1" in shown
    assert TOKEN not in shown

    refused = client.post(f"{page}/variables", {"name": "PATH", "value": "/x", "secret": "on"})
    assert refused.status_code == 400
    assert "set by the sandbox itself" in refused.content.decode()

    assert client.post(f"{page}/variables/API_TOKEN/delete").status_code == 302
    assert list(ProjectVariable.objects.values_list("name", flat=True)) == ["REGION"]


def test_the_admin_lists_names_without_values(admin_client, project) -> None:  # type: ignore[no-untyped-def]
    project_variable_set(project=project, name="API_TOKEN", value=TOKEN, secret=True)
    variable = ProjectVariable.objects.get()

    listing = admin_client.get("/admin/repos/projectvariable/").content.decode()
    change = admin_client.get(f"/admin/repos/projectvariable/{variable.pk}/change/").content.decode()

    assert "API_TOKEN" in listing and "API_TOKEN" in change
    for page in (listing, change):
        assert TOKEN not in page and variable.value_encrypted not in page


def test_deleting_a_name_no_variable_can_have_is_404_without_a_query(owner_client, project) -> None:  # type: ignore[no-untyped-def]
    # PostgreSQL refuses a NUL in a query outright (a 500, and the transaction lost):
    # such a name is not looked up at all.
    for name in ("a%00b", "x" * 200, "1abc"):
        response = owner_client.delete(f"/api/projects/{project.pk}/repository/variables/{name}")
        assert response.status_code == 404, (name, response.status_code)
