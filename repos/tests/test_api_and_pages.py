"""The Repository API and page: link, clone, change, unlink — yours only."""

from __future__ import annotations

from pathlib import Path

import pytest

from repos.models import Repository, RepositoryStatus
from repos.services.linking import repository_clone_execute
from repos.tests.test_services import git, make_repo

pytestmark = pytest.mark.django_db


@pytest.fixture
def repo(tmp_path: Path, settings) -> Path:
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    return make_repo(tmp_path / "repos" / "app")


def url(project) -> str:
    return f"/api/projects/{project.pk}/repository"


def test_link_read_change_and_unlink_over_the_api(owner_client, project, repo: Path) -> None:
    assert owner_client.get(url(project)).status_code == 404

    linked = owner_client.put(url(project), {"path": "app", "test_command": "pytest -q"}, format="json")
    assert linked.status_code == 200, linked.json()
    body = linked.json()
    assert body["path"] == "app" and body["base_branch"] == "main"  # no server paths
    assert body["state"]["clean"] is True and body["state"]["head_subject"] == "Initial"
    assert body["state"]["branches"] == ["main"]

    git(repo, "branch", "develop")
    changed = owner_client.patch(url(project), {"base_branch": "develop", "merge_strategy": "ff_only"}, format="json")
    assert changed.status_code == 200
    assert changed.json()["base_branch"] == "develop" and changed.json()["merge_strategy"] == "ff_only"

    assert owner_client.delete(url(project)).status_code == 204
    assert not Repository.objects.exists()
    assert repo.is_dir()  # the files stay


def test_bad_input_is_400_with_field_errors_and_writes_nothing(owner_client, project, repo: Path) -> None:
    for body, field in (
        ({"path": "/etc"}, "path"),
        ({"path": "app", "base_branch": "nope"}, "base_branch"),
        ({"path": "app", "merge_strategy": "rebase"}, "merge_strategy"),
        ({"path": 42}, "path"),
        ({}, "path"),
    ):
        response = owner_client.put(url(project), body, format="json")
        assert response.status_code == 400, body
        assert field in response.json()["extra"]["fields"], body
    assert owner_client.post(url(project) + "/clone", {"url": "ext::sh -c id"}, format="json").status_code == 400
    assert not Repository.objects.exists()


def test_clone_over_the_api(owner_client, project, repo: Path, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        response = owner_client.post(url(project) + "/clone", {"url": str(repo)}, format="json")
    assert response.status_code == 202 and response.json()["status"] == "cloning"
    assert len(callbacks) == 1  # the clone job is queued on commit
    repository_clone_execute(repository_id=Repository.objects.get().pk)
    body = owner_client.get(url(project)).json()
    assert body["status"] == RepositoryStatus.READY and body["origin_url"] == str(repo.resolve())


def test_another_users_project_is_404(other_client, project, repo: Path) -> None:
    assert other_client.put(url(project), {"path": "app"}, format="json").status_code == 404
    assert other_client.get(url(project)).status_code == 404
    assert other_client.post(url(project) + "/clone", {"url": str(repo)}, format="json").status_code == 404
    assert not Repository.objects.exists()


def test_the_page_links_and_shows_the_state(client, owner, project, repo: Path) -> None:
    client.force_login(owner)
    page = f"/projects/{project.pk}/repository"
    unlinked = client.get(page).content.decode()
    assert "No repository is linked" in unlinked
    # Runs still have a repository (the project's own), and the page says so.
    assert "a repository of the project&#x27;s own" in unlinked or "a repository of the project's own" in unlinked

    refused = client.post(page + "/link", {"path": "../elsewhere", "merge_strategy": "merge"})
    assert refused.status_code == 400
    assert "inside the server" in refused.content.decode()

    response = client.post(page + "/link", {"path": "app", "merge_strategy": "merge", "test_command": "make test"})
    assert response.status_code == 302
    (repo / "a.txt").write_text("dirty\n")
    html = client.get(page).content.decode()
    assert "1 uncommitted change" in html and "make test" in html and "Initial" in html


def test_the_page_of_another_users_project_is_404(client, other_user, project) -> None:
    client.force_login(other_user)
    assert client.get(f"/projects/{project.pk}/repository").status_code == 404
    assert client.post(f"/projects/{project.pk}/repository/link", {"path": "app"}).status_code == 404


def _node_checkout(repo: Path) -> None:
    (repo / "package.json").write_text('{"scripts": {"test": "vitest run"}}')
    (repo / "package-lock.json").write_text("{}")


def test_the_api_suggests_a_setup_and_test_command_for_its_owner_only(
    owner_client, other_client, project, repo: Path
) -> None:
    _node_checkout(repo)
    assert owner_client.put(url(project), {"path": "app"}, format="json").json()["suggested"]["test_command"] == (
        "npm test"
    )
    body = owner_client.get(url(project)).json()
    assert body["test_command"] == ""  # suggested, not set
    assert body["suggested"] == {
        "setup_script": "npm ci",
        "test_command": "npm test",
        "reasons": ["package.json has a test script: npm test; package-lock.json: npm ci."],
    }
    assert other_client.get(url(project)).status_code == 404


def test_no_suggestion_while_cloning(owner_client, project, repo: Path) -> None:
    _node_checkout(repo)
    response = owner_client.post(url(project) + "/clone", {"url": str(repo)}, format="json")
    assert response.status_code == 202 and response.json()["suggested"] is None


def test_the_page_says_when_there_is_nothing_to_suggest(client, owner, project, repo: Path) -> None:
    client.force_login(owner)
    page = f"/projects/{project.pk}/repository"
    assert client.post(page + "/link", {"path": "app", "merge_strategy": "merge"}).status_code == 302
    html = client.get(page).content.decode()
    assert "Nothing to suggest from the repository's files." in html and "data-fill-field" not in html


def test_the_page_shows_the_suggestion_with_a_button_that_fills_the_field(client, owner, project, repo: Path) -> None:
    _node_checkout(repo)
    client.force_login(owner)
    page = f"/projects/{project.pk}/repository"
    assert client.post(page + "/link", {"path": "app", "merge_strategy": "merge"}).status_code == 302
    html = client.get(page).content.decode()
    assert 'data-testid="suggested-test-command">npm test</code>' in html
    assert 'data-fill-field="test_command" data-fill-value="npm test"' in html
    assert 'data-fill-field="setup_script" data-fill-value="npm ci"' in html
    assert "<code>npm ci</code>" in html
    assert "package-lock.json: npm ci." in html

    # Accepted: the button is not offered again.
    assert (
        client.post(
            page + "/settings", {"base_branch": "main", "merge_strategy": "merge", "test_command": "npm test"}
        ).status_code
        == 302
    )
    assert 'data-fill-field="test_command"' not in client.get(page).content.decode()
    assert client.post(page + "/environment", {"setup_script": "npm ci"}).status_code == 302
    assert "data-fill-field" not in client.get(page).content.decode()
