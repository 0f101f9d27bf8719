"""A repository's base image, set over the API and on the Repository page: a malformed
reference, a layout outside the allowed folders or in someone else's, or a registry on
an internal address is a 400 field error that changes nothing; a good one is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.utils.html import escape

from core.sandbox_image_references import BAD_REFERENCE, LAYOUT_OUTSIDE
from repos.models import Repository, RepositoryFolder
from repos.services.settings import BASE_IMAGE_HOST_NOT_ALLOWED, BASE_IMAGE_LAYOUT_UNAVAILABLE
from repos.tests.test_services import make_repo

pytestmark = pytest.mark.django_db


@pytest.fixture
def linked(owner_client, project, tmp_path: Path, settings) -> Path:
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    settings.IMAGES_LOCAL_ROOT = str(tmp_path / "layouts")
    (tmp_path / "layouts" / "ci").mkdir(parents=True)
    repo = make_repo(tmp_path / "repos" / "app")
    assert owner_client.put(url(project), {"path": "app"}, format="json").status_code == 200
    return repo


def url(project) -> str:
    return f"/api/projects/{project.pk}/repository"


def stored(project) -> str:
    return Repository.objects.get(project=project).base_image


def test_the_api_keeps_a_good_reference_and_shows_it(owner_client, project, linked: Path) -> None:
    for reference in ("python:3.12-slim", "ghcr.io/team/ci:1@sha256:" + "b" * 64, "oci:ci:v2", ""):
        response = owner_client.patch(url(project), {"base_image": reference}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["base_image"] == reference
        assert stored(project) == reference
    assert owner_client.get(url(project)).json()["base_image"] == ""


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("Python:3.12", BAD_REFERENCE),
        ("python:3.12 slim", BAD_REFERENCE),
        ("python:3;id", BAD_REFERENCE),
        ("oci:ci", BAD_REFERENCE),
        ("oci:/etc:v1", LAYOUT_OUTSIDE),
        ("oci:../../..:v1", LAYOUT_OUTSIDE),
        ("127.0.0.1:5000/team/app:1", BASE_IMAGE_HOST_NOT_ALLOWED),
    ],
)
def test_the_api_refuses_a_bad_reference_with_a_field_error(
    owner_client, project, linked: Path, reference: str, message: str
) -> None:
    owner_client.patch(url(project), {"base_image": "python:3.12-slim"}, format="json")
    response = owner_client.patch(url(project), {"base_image": reference, "test_command": "make"}, format="json")
    assert response.status_code == 400
    assert response.json()["extra"]["fields"] == {"base_image": [message]}
    repository = Repository.objects.get(project=project)
    assert (repository.base_image, repository.test_command) == ("python:3.12-slim", "")


def test_a_layout_in_another_users_folder_is_refused(owner_client, project, other_user, linked: Path, settings) -> None:
    theirs = Path(settings.REPOS_ROOT) / "theirs" / "layout"
    theirs.mkdir(parents=True)
    RepositoryFolder.objects.create(path=str(theirs.parent.resolve()), owner=other_user)
    response = owner_client.patch(url(project), {"base_image": f"oci:{theirs}:v1"}, format="json")
    assert response.status_code == 400
    assert response.json()["extra"]["fields"] == {"base_image": [BASE_IMAGE_LAYOUT_UNAVAILABLE]}
    mine = linked / "image-layout"
    mine.mkdir()
    assert owner_client.patch(url(project), {"base_image": f"oci:{mine}:v1"}, format="json").status_code == 200


def test_the_page_shows_sets_and_refuses_the_base_image(client, owner, project, linked: Path) -> None:
    client.force_login(owner)
    page = f"/projects/{project.pk}/repository"
    html = client.get(page).content.decode()
    assert 'name="base_image"' in html and "Empty: the server&#x27;s own." in html
    form = {"base_branch": "main", "merge_strategy": "merge", "test_command": "", "base_image": "oci:/etc:v1"}
    refused = client.post(page + "/settings", form)
    assert refused.status_code == 400
    assert escape(LAYOUT_OUTSIDE) in refused.content.decode()
    assert stored(project) == ""
    assert client.post(page + "/settings", {**form, "base_image": "node:22"}).status_code == 302
    assert stored(project) == "node:22"
    assert 'value="node:22"' in client.get(page).content.decode()
