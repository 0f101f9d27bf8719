"""A project's model provider and OpenAI-compatible endpoint: on the API and the settings
page, the key stored encrypted and never shown, the endpoint's host checked so that a
project owner cannot point the server at an internal service."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from core.crypto import decrypt_secret
from projects.models import Project
from tests.api_helpers import field_errors

pytestmark = pytest.mark.django_db

PUBLIC = "https://8.8.8.8/v1"  # an address literal: public, and resolved without a network


def detail(project: Project) -> str:
    return f"/api/projects/{project.pk}"


@pytest.fixture(autouse=True)
def _no_allowed_networks(settings) -> None:
    settings.CLONE_ALLOWED_NETWORKS = []
    settings.OPENAI_BASE_URL = "http://127.0.0.1:11434/v1"  # the operator's own, local


def test_a_project_switches_to_an_openai_compatible_endpoint_and_its_key_is_never_shown(
    owner_client: APIClient, project: Project
) -> None:
    response = owner_client.patch(
        detail(project),
        {"llm_provider": "openai", "llm_base_url": PUBLIC, "llm_api_key": "sk-or-secret", "llm_model": "gpt-4.1"},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["llm_provider"], body["llm_base_url"], body["llm_model"]) == ("openai", PUBLIC, "gpt-4.1")
    assert body["llm_api_key_saved"] is True
    assert "sk-or-secret" not in response.content.decode()
    project.refresh_from_db()
    assert project.llm_api_key_encrypted and "sk-or-secret" not in project.llm_api_key_encrypted
    assert decrypt_secret(project.llm_api_key_encrypted) == "sk-or-secret"
    assert "sk-or-secret" not in owner_client.get(detail(project)).content.decode()

    # Absent or null keeps the key; "" removes it.
    assert owner_client.patch(detail(project), {"llm_api_key": None}, format="json").json()["llm_api_key_saved"]
    assert owner_client.patch(detail(project), {"llm_model": "gpt-4o"}, format="json").json()["llm_api_key_saved"]
    assert not owner_client.patch(detail(project), {"llm_api_key": ""}, format="json").json()["llm_api_key_saved"]
    back = owner_client.patch(detail(project), {"llm_provider": "", "llm_base_url": ""}, format="json").json()
    assert (back["llm_provider"], back["llm_base_url"]) == ("", "")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1",
        "http://localhost:6379/v1",
        "http://169.254.169.254/latest",
        "http://10.0.0.5/v1",
        "http://[::1]:8080/v1",
        "http://[::ffff:127.0.0.1]/v1",
    ],
)
def test_an_internal_address_set_by_a_project_owner_is_refused(owner_client: APIClient, project: Project, url) -> None:
    response = owner_client.patch(detail(project), {"llm_provider": "openai", "llm_base_url": url}, format="json")
    errors = field_errors(response)
    assert "internal address" in errors["llm_base_url"][0]
    project.refresh_from_db()
    assert (project.llm_provider, project.llm_base_url) == ("", "")


def test_the_operators_own_endpoint_is_trusted_and_allowed_networks_open_others(
    owner_client: APIClient, project: Project, settings
) -> None:
    own = owner_client.patch(
        detail(project), {"llm_provider": "openai", "llm_base_url": "http://127.0.0.1:11434/v1"}, format="json"
    )
    assert own.status_code == 200, own.content
    settings.CLONE_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    allowed = owner_client.patch(detail(project), {"llm_base_url": "http://10.1.2.3:8000/v1"}, format="json")
    assert allowed.status_code == 200, allowed.content


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"llm_provider": "mistral"}, "llm_provider", "not a valid choice"),
        ({"llm_provider": "openai", "llm_base_url": "ftp://8.8.8.8/v1"}, "llm_base_url", "not an http(s) URL"),
        ({"llm_provider": "openai", "llm_base_url": "api.openai.com"}, "llm_base_url", "not an http(s) URL"),
        ({"llm_provider": "openai", "llm_base_url": "https://[::1/v1"}, "llm_base_url", "not an http(s) URL"),
        ({"llm_provider": "anthropic", "llm_base_url": PUBLIC}, "llm_base_url", "OpenAI-compatible"),
        ({"llm_api_key": "two words"}, "llm_api_key", "one word"),
        ({"llm_base_url": 5}, "llm_base_url", "string"),
    ],
)
def test_bad_values_are_400_with_field_errors(owner_client: APIClient, project: Project, body, field, words) -> None:
    errors = field_errors(owner_client.patch(detail(project), body, format="json"))
    assert words in " ".join(errors[field])


def test_the_settings_page_sets_the_endpoint_refuses_an_internal_one_and_never_shows_the_key(
    client, owner, project: Project
) -> None:
    client.force_login(owner)
    url = reverse("projects:edit", args=[project.pk])
    form = {"name": project.name, "llm_provider": "openai", "llm_base_url": "http://192.168.1.20/v1"}
    refused = client.post(url, form)
    assert refused.status_code == 400
    assert "internal address" in refused.content.decode()

    saved = client.post(url, {**form, "llm_base_url": PUBLIC, "llm_api_key": "sk-page-secret"})
    assert saved.status_code == 302
    project.refresh_from_db()
    assert (project.llm_provider, project.llm_base_url) == ("openai", PUBLIC)
    assert decrypt_secret(project.llm_api_key_encrypted) == "sk-page-secret"
    page = client.get(url).content.decode()
    assert "sk-page-secret" not in page and "A key is saved" in page
    assert 'value="openai" selected' in page

    # Saving again without a key keeps it; the box removes it.
    client.post(url, {**form, "llm_base_url": PUBLIC})
    project.refresh_from_db()
    assert decrypt_secret(project.llm_api_key_encrypted) == "sk-page-secret"
    client.post(url, {**form, "llm_base_url": PUBLIC, "llm_api_key_clear": "on"})
    project.refresh_from_db()
    assert project.llm_api_key_encrypted == ""


def test_per_agent_models_are_set_and_cleared_on_the_api(owner_client: APIClient, project: Project) -> None:
    body = owner_client.patch(
        detail(project), {"planner_model": "o4-mini", "coder_model": "gpt-4.1", "reviewer_model": ""}, format="json"
    ).json()
    assert (body["planner_model"], body["coder_model"], body["reviewer_model"]) == ("o4-mini", "gpt-4.1", "")
    assert owner_client.patch(detail(project), {"coder_model": ""}, format="json").json()["coder_model"] == ""
    errors = field_errors(owner_client.patch(detail(project), {"coder_model": "x" * 101}, format="json"))
    assert "coder_model" in errors
