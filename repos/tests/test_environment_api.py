"""A repository's environment over the API and on its page: what is in force, the
settings (400 with field errors, nothing written), Rebuild queued and shown, yours only."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.tests.test_sandbox import needs_bwrap
from pipelines.tests.repositories import committed_repository
from repos.environments.services.rebuild import environment_prepare_in_background
from repos.models import PreparedEnvironment, Repository
from repos.services.linking import repository_link

pytestmark = pytest.mark.django_db


@pytest.fixture
def repository(project, tmp_path: Path, settings) -> Repository:
    settings.ENVIRONMENTS_ROOT = str(tmp_path / "environments")
    root = committed_repository(
        tmp_path / "repos" / "app",
        {"requirements.txt": "requests==2.32.3\n", "package.json": '{"name": "app"}\n', "a.py": "A = 1\n"},
    )
    return repository_link(project=project, path=str(root))


def url(project) -> str:
    return f"/api/projects/{project.pk}/repository/environment"


def test_the_environment_is_read_and_changed_over_the_api(owner_client, project, repository) -> None:
    body = owner_client.get(url(project)).json()
    assert body["in_force"] is None and body["key"] == "" and body["recent"] == []

    changed = owner_client.patch(url(project), {"setup_script": "pip install -r requirements.txt\n"}, format="json")

    assert changed.status_code == 200, changed.json()
    body = changed.json()
    assert body["setup_script"] == "pip install -r requirements.txt"
    assert body["in_force"]["source"] == "page" and len(body["key"]) == 64
    repository.refresh_from_db()
    assert repository.setup_script == "pip install -r requirements.txt"
    network = owner_client.patch(url(project), {"tests_network": True}, format="json").json()
    assert network["tests_network"] is True and network["setup_script"] == "pip install -r requirements.txt"


def test_bad_environment_input_is_400_and_writes_nothing(owner_client, project, repository) -> None:
    for body, field in (
        ({"setup_script": "echo \x00"}, "setup_script"),
        ({"setup_script": "x" * 20_001}, "setup_script"),
        ({"setup_script": 42}, "setup_script"),
        ({"tests_network": "perhaps"}, "tests_network"),
    ):
        response = owner_client.patch(url(project), body, format="json")
        assert response.status_code == 400, (body, response.json())
        assert field in response.json()["extra"]["fields"], response.json()
    repository.refresh_from_db()
    assert repository.setup_script == "" and repository.tests_network is False


def test_another_users_environment_is_404(other_client, project, repository) -> None:
    assert other_client.get(url(project)).status_code == 404
    assert other_client.patch(url(project), {"setup_script": "id"}, format="json").status_code == 404
    assert other_client.post(url(project) + "/rebuild").status_code == 404
    repository.refresh_from_db()
    assert repository.setup_script == ""


def test_rebuild_without_a_setup_script_says_there_is_nothing_to_prepare(owner_client, project, repository) -> None:
    response = owner_client.post(url(project) + "/rebuild")
    assert response.status_code == 400
    assert "no setup script" in str(response.json()).lower()


@needs_bwrap
def test_rebuild_is_queued_then_prepared_and_its_output_shown(
    owner_client, owner_session_client, project, repository, django_capture_on_commit_callbacks
) -> None:
    owner_client.patch(
        url(project), {"setup_script": "mkdir -p out && echo built > out/file && echo done-setup"}, format="json"
    )

    with django_capture_on_commit_callbacks() as callbacks:
        response = owner_client.post(url(project) + "/rebuild")

    assert response.status_code == 202, response.json()
    assert len(callbacks) == 1, "the preparation is queued for a worker"
    assert response.json()["current"]["status"] == "preparing", "shown as under way at once"
    key = response.json()["key"]
    environment_prepare_in_background(repository_id=repository.pk, commit=response.json()["base_commit"])

    body = owner_client.get(url(project)).json()
    assert body["current"]["status"] == "ready" and body["current"]["key"] == key
    assert body["current"]["paths"] == ["out"] and "done-setup" in body["current"]["output"]
    page = owner_session_client.get(f"/projects/{project.pk}/repository").content.decode()
    assert 'data-testid="environment-state"' in page and "done-setup" in page
    assert "the script written on this page" in page
    assert PreparedEnvironment.objects.get().size_bytes == len("built\n")


def test_the_page_says_which_setup_script_is_in_force_and_suggests_one(
    client, owner, project, tmp_path, settings
) -> None:
    client.force_login(owner)
    settings.ENVIRONMENTS_ROOT = str(tmp_path / "environments")
    root = committed_repository(
        tmp_path / "repos" / "carried",
        {".autocoder/setup.sh": "npm ci\n", "package.json": '{"name": "x", "scripts": {"test": "uvu"}}\n'},
    )
    repository_link(project=project, path=str(root))

    page = client.get(f"/projects/{project.pk}/repository").content.decode()

    assert "the repository&#x27;s .autocoder/setup.sh" in page
    assert 'data-testid="setup-in-force-script"' in page and "npm ci" in page
    assert 'data-fill-field="setup_script"' in page, "the suggested setup can be taken with one click"
    saved = client.post(f"/projects/{project.pk}/repository/environment", {"setup_script": "npm install"})
    assert saved.status_code == 302
    page = client.get(f"/projects/{project.pk}/repository").content.decode()
    assert "the script written on this page" in page


def test_operators_see_kept_environments_and_base_results_in_the_admin(admin_client, repository) -> None:
    from repos.models import BaseTestResult

    prepared = PreparedEnvironment.objects.create(
        repository=repository, key="ab" * 32, status="ready", size_bytes=123_456, source="page"
    )
    BaseTestResult.objects.create(repository=repository, base_commit="c0ffee", test_command="pytest -q", passed=False)

    listing = admin_client.get("/admin/repos/preparedenvironment/").content.decode()
    assert "abababababab" in listing and "123456" in listing.replace(",", "")
    assert admin_client.get(f"/admin/repos/preparedenvironment/{prepared.pk}/change/").status_code == 200
    assert "c0ffee" in admin_client.get("/admin/repos/basetestresult/").content.decode()
    assert admin_client.get("/admin/repos/preparedenvironment/add/").status_code == 403
