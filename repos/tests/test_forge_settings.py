"""Where run branches are pushed and which forge opens their pull requests: set on the
Repository page and over the API; the token is stored encrypted and never shown again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from core.crypto import decrypt_secret
from repos.models import Repository, RepositoryFolder
from repos.tests.test_services import make_repo

pytestmark = pytest.mark.django_db

TOKEN = "ghp_forge-token-s3cr3t"
PUBLIC_API = "https://93.184.215.14/api/v3"  # a public address: no DNS needed


@pytest.fixture
def repo(tmp_path: Path, settings) -> Path:  # type: ignore[no-untyped-def]
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    return make_repo(tmp_path / "repos" / "app")


@pytest.fixture
def linked(owner_client, project, repo: Path) -> Repository:  # type: ignore[no-untyped-def]
    assert owner_client.put(f"/api/projects/{project.pk}/repository", {"path": "app"}, format="json").status_code == 200
    return Repository.objects.get()


def forge_url(project) -> str:  # type: ignore[no-untyped-def]
    return f"/api/projects/{project.pk}/repository/forge"


def a_bare_remote(owner_client, project, repo: Path) -> Path:  # type: ignore[no-untyped-def]
    """A bare repository under the root, in a folder that is the owner's."""
    bare = repo.parent / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    RepositoryFolder.objects.create(path=str(bare.resolve()), owner=project.owner)
    return bare


def test_set_over_the_api_token_write_only_and_encrypted(owner_client, project, repo: Path, linked) -> None:  # type: ignore[no-untyped-def]
    bare = a_bare_remote(owner_client, project, repo)
    body = {
        "push_url": f"file://{bare}",
        "forge_kind": "github",
        "forge_api_url": PUBLIC_API,
        "forge_repository": "team/app",
        "token": TOKEN,
    }
    response = owner_client.put(forge_url(project), body, format="json")
    assert response.status_code == 200, response.json()
    data = response.json()
    assert (data["push_url"], data["forge_kind"], data["forge_api_url"]) == ("remote.git", "github", PUBLIC_API)
    assert str(repo.parent) not in response.content.decode()  # no server paths
    assert data["forge_repository"] == "team/app" and data["forge_token_saved"] is True
    assert TOKEN not in response.content.decode()
    linked.refresh_from_db()
    assert TOKEN not in linked.forge_token_encrypted and decrypt_secret(linked.forge_token_encrypted) == TOKEN
    assert decrypt_secret(linked.forge_webhook_secret_encrypted)  # made for the webhook
    assert data["forge_webhook_secret"] == decrypt_secret(linked.forge_webhook_secret_encrypted)
    assert data["forge_webhook_url"] == f"http://testserver/api/forges/webhooks/{linked.pk}"
    secret = linked.forge_webhook_secret_encrypted

    # Absent token: kept; the webhook secret stays the same.
    kept = owner_client.put(forge_url(project), {**body, "token": None}, format="json")
    assert kept.status_code == 200 and kept.json()["forge_token_saved"] is True
    assert TOKEN not in owner_client.get(f"/api/projects/{project.pk}/repository").content.decode()
    linked.refresh_from_db()
    assert decrypt_secret(linked.forge_token_encrypted) == TOKEN and linked.forge_webhook_secret_encrypted == secret

    # Off: no forge, no token.
    off = owner_client.put(forge_url(project), {"forge_kind": "", "token": ""}, format="json")
    assert off.status_code == 200 and off.json()["forge_kind"] == "" and off.json()["forge_token_saved"] is False
    assert off.json()["forge_webhook_url"] is None and off.json()["forge_webhook_secret"] is None


def test_bad_settings_are_400_with_field_errors_and_change_nothing(
    owner_client, project, repo: Path, linked, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.CLONE_ALLOWED_NETWORKS = []
    good = {"forge_kind": "gitea", "forge_api_url": PUBLIC_API, "forge_repository": "team/app", "token": TOKEN}
    cases = [
        ({**good, "forge_kind": "bitbucket"}, "forge_kind"),
        ({**good, "forge_api_url": ""}, "forge_api_url"),  # Gitea has no default
        ({**good, "forge_api_url": "ftp://forge.example"}, "forge_api_url"),
        ({**good, "forge_api_url": "https://user:pw@forge.example/api/v1"}, "forge_api_url"),
        ({**good, "forge_api_url": "http://127.0.0.1:6379/api/v1"}, "forge_api_url"),  # internal: refused
        ({**good, "forge_repository": ""}, "forge_repository"),
        ({**good, "forge_repository": "app"}, "forge_repository"),
        ({**good, "token": "two words"}, "token"),
        ({**good, "token": None}, "token"),  # a forge needs a token, and none is saved
        ({**good, "push_url": "ext::sh -c id"}, "push_url"),
        ({**good, "push_url": "/etc"}, "push_url"),
        ({**good, "forge_repository": 42}, "forge_repository"),
    ]
    for body, field in cases:
        response = owner_client.put(forge_url(project), body, format="json")
        assert response.status_code == 400, body
        assert field in response.json()["extra"]["fields"], (body, response.json())
    linked.refresh_from_db()
    assert (linked.forge_kind, linked.forge_token_encrypted, linked.push_url) == ("", "", "")


def test_push_to_a_folder_that_is_not_yours_is_refused(
    owner_client, other_client, project, repo: Path, linked, other_user
) -> None:  # type: ignore[no-untyped-def]
    theirs = repo.parent / "theirs.git"
    subprocess.run(["git", "init", "-q", "--bare", str(theirs)], check=True)
    RepositoryFolder.objects.create(path=str(theirs.resolve()), owner=other_user)
    response = owner_client.put(forge_url(project), {"push_url": str(theirs)}, format="json")
    assert response.status_code == 400 and "push_url" in response.json()["extra"]["fields"]
    assert other_client.put(forge_url(project), {"push_url": ""}, format="json").status_code == 404


def test_the_page_saves_and_never_shows_the_token(client, owner, project, repo: Path, linked) -> None:  # type: ignore[no-untyped-def]
    client.force_login(owner)
    page = client.get(f"/projects/{project.pk}/repository")
    assert b"Pull requests" in page.content and b'name="forge_kind"' in page.content
    form = {
        "push_url": "https://93.184.215.14/team/app.git",
        "forge_kind": "gitlab",
        "forge_api_url": "",
        "forge_repository": "group/sub/app",
        "token": TOKEN,
    }
    saved = client.post(f"/projects/{project.pk}/repository/forge", form, follow=True)
    assert saved.status_code == 200 and b"Pull request settings saved." in saved.content
    assert TOKEN.encode() not in saved.content and b"A token is saved." in saved.content
    linked.refresh_from_db()
    assert linked.forge_api_url == "https://gitlab.com/api/v4"  # GitLab's own by default
    # Saved again without a token: kept. Then removed.
    client.post(f"/projects/{project.pk}/repository/forge", {**form, "token": ""})
    linked.refresh_from_db()
    assert decrypt_secret(linked.forge_token_encrypted) == TOKEN
    refused = client.post(f"/projects/{project.pk}/repository/forge", {**form, "token": "", "remove_token": "on"})
    assert refused.status_code == 400 and b"Give this too" in refused.content  # a forge needs a token
    client.post(f"/projects/{project.pk}/repository/forge", {"forge_kind": "", "remove_token": "on"})
    linked.refresh_from_db()
    assert (linked.forge_kind, linked.forge_token_encrypted) == ("", "")


def test_the_admin_never_shows_the_token(admin_client, project, repo: Path, linked) -> None:  # type: ignore[no-untyped-def]
    from core.crypto import encrypt_secret

    Repository.objects.filter(pk=linked.pk).update(forge_kind="github", forge_token_encrypted=encrypt_secret(TOKEN))
    page = admin_client.get(f"/admin/repos/repository/{linked.pk}/change/")
    assert page.status_code == 200
    assert TOKEN.encode() not in page.content and b"forge_token_encrypted" not in page.content


# URLs urlsplit cannot read (ValueError: a bracket left open, a port past 65535, a host NFKC
# turns into a path) and their neighbours: each a 400 on its field, never a 500.
NOT_URLS = [
    "https://[::1",
    "https://[::1/x",
    "https://[]/x",
    "https://[::1]:99999/x",
    "https://a:99999",
    "https://a:99999/x",
    "https://a:-1/x",
    "https://a:0",
    "https://a:0/x",
    "https://[::1]:0/x",
    "https://",
    "https:///x",
    "https://user@",
    "https://user@/x",
    "https://\u2100/x",  # ℀: NFKC makes it "a/c"
    # Hosts that are not plain ASCII names or IP literals.
    "https://é",
    "https://ü.example/x",
    "https://１２７.０.０.１/x",
    "https://a\u200b/x",
    "https://%41/x",
    "https://[v1.x]/x",
    "https://[fe80::1%25eth0]/x",
]
NOT_GIT_URLS = [*NOT_URLS, "git://[::1/x", "ssh://[::1/x", "ssh://git@[::1:22/x", "git://a:0/x", "ssh://a:99999/x"]


@pytest.mark.parametrize("bad", NOT_URLS)
def test_a_forge_api_url_that_is_not_a_url_is_a_400(owner_client, project, repo: Path, linked, bad: str) -> None:  # type: ignore[no-untyped-def]
    body = {"forge_kind": "github", "forge_api_url": bad, "forge_repository": "team/app", "token": TOKEN}
    response = owner_client.put(forge_url(project), body, format="json")
    assert response.status_code == 400, response.content
    assert "forge_api_url" in response.json()["extra"]["fields"]
    linked.refresh_from_db()
    assert (linked.forge_kind, linked.forge_api_url, linked.forge_token_encrypted) == ("", "", "")


@pytest.mark.parametrize("bad", NOT_GIT_URLS)
def test_a_push_or_clone_url_that_is_not_a_url_is_a_400(owner_client, project, repo: Path, linked, bad: str) -> None:  # type: ignore[no-untyped-def]
    response = owner_client.put(forge_url(project), {"push_url": bad}, format="json")
    assert response.status_code == 400, response.content
    assert "push_url" in response.json()["extra"]["fields"]
    linked.refresh_from_db()
    assert linked.push_url == ""
    # Cloning it (into a project with no repository yet).
    linked.delete()
    clone = owner_client.post(f"/api/projects/{project.pk}/repository/clone", {"url": bad}, format="json")
    assert clone.status_code == 400, clone.content
    assert "url" in clone.json()["extra"]["fields"]
    assert not Repository.objects.exists()
