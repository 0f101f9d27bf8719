"""The forge clients against the fake forge: a real HTTP server speaking GitHub's,
GitLab's and Gitea's pull request endpoints."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from repos.forges import (
    ForgeError,
    ForgeKind,
    PullRequestState,
    forge_client,
    webhook_delivery_id,
    webhook_is_authentic,
    webhook_pull_request,
)
from tests.fake_forge import FakeForge

TOKEN = "forge-token-s3cr3t"
KINDS = [ForgeKind.GITHUB, ForgeKind.GITLAB, ForgeKind.GITEA]


@pytest.fixture
def forge(tmp_path: Path, settings) -> Iterator[FakeForge]:  # type: ignore[no-untyped-def]
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the fake forge's address
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(bare), str(work)], check=True, capture_output=True)
    git = ["git", "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "base"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "main", "main:autocoder/task-1-run-1"], cwd=work, check=True)
    server = FakeForge().start()
    server.add_repository("team/app", git_dir=bare)
    server.add_token(TOKEN)
    server.add_token("read-only", write=False)
    yield server
    server.stop()


def client(forge: FakeForge, kind: str, *, token: str = TOKEN, repository: str = "team/app"):  # type: ignore[no-untyped-def]
    return forge_client(kind=kind, api_url=forge.api_url(kind), repository=repository, token=token)


@pytest.mark.parametrize("kind", KINDS)
def test_open_and_follow_a_pull_request(forge: FakeForge, kind: str) -> None:
    pull = client(forge, kind).open_pull_request(
        head="autocoder/task-1-run-1", base="main", title="Add the thing", body="Plan: …"
    )
    assert (pull.number, pull.state) == (1, PullRequestState.OPEN)
    assert pull.url == forge.html_url(kind, "team/app", 1)
    stored = forge.repositories["team/app"].pulls[1]
    assert (stored.head, stored.base, stored.title, stored.body) == (
        "autocoder/task-1-run-1",
        "main",
        "Add the thing",
        "Plan: …",
    )

    assert client(forge, kind).pull_request(1).state == PullRequestState.OPEN
    forge.set_state("team/app", 1, "merged")
    assert client(forge, kind).pull_request(1).state == PullRequestState.MERGED
    forge.set_state("team/app", 1, "closed")
    assert client(forge, kind).pull_request(1).state == PullRequestState.CLOSED


@pytest.mark.parametrize("kind", KINDS)
def test_refusals_say_what_to_do_and_never_show_the_token(forge: FakeForge, kind: str) -> None:
    open_it = {"head": "autocoder/task-1-run-1", "base": "main", "title": "T", "body": ""}
    cases = [
        (client(forge, kind, token="wrong"), "forge_token_refused", "refused the access token"),
        (client(forge, kind, token="read-only"), "forge_forbidden", "may not open pull requests"),
        (client(forge, kind, repository="team/other"), "forge_not_found", "has no repository team/other"),
    ]
    for forge_client_, code, words in cases:
        with pytest.raises(ForgeError) as error:
            forge_client_.open_pull_request(**open_it)
        assert (error.value.code, error.value.retryable) == (code, False)
        assert words in error.value.message
    client(forge, kind).open_pull_request(**open_it)
    with pytest.raises(ForgeError) as duplicate:
        client(forge, kind).open_pull_request(**open_it)
    assert duplicate.value.code == "forge_refused" and "already exists" in duplicate.value.message
    with pytest.raises(ForgeError) as missing_branch:
        client(forge, kind).open_pull_request(**{**open_it, "head": "nope"})
    assert "branch nope does not exist" in missing_branch.value.message
    # The token was sent, in the forge's own header, and appears in no message.
    sent = forge.requests[-1].headers
    assert TOKEN in (sent.get("PRIVATE-TOKEN", "") + sent.get("Authorization", ""))
    for error in (duplicate.value, missing_branch.value):
        assert TOKEN not in str(error) and TOKEN not in repr(error.__cause__)


@pytest.mark.parametrize("kind", KINDS)
def test_an_unreachable_or_failing_forge_is_worth_retrying(forge: FakeForge, kind: str) -> None:
    forge.fail_next = [502]
    with pytest.raises(ForgeError) as failing:
        client(forge, kind).pull_request(1)
    assert (failing.value.code, failing.value.retryable) == ("forge_unavailable", True)
    assert "Try again later; the branch stays pushed" in failing.value.message

    forge.unreachable = True
    with pytest.raises(ForgeError) as unreachable:
        client(forge, kind).pull_request(1)
    assert (unreachable.value.code, unreachable.value.retryable) == ("forge_unreachable", True)
    assert unreachable.value.__cause__ is None  # the transport error held the request, token included
    forge.unreachable = False
    forge.stop()
    with pytest.raises(ForgeError) as stopped:
        client(forge, kind).pull_request(1)
    assert stopped.value.code == "forge_unreachable"


@pytest.mark.parametrize("kind", KINDS)
def test_webhook_signatures(forge: FakeForge, kind: str) -> None:
    client(forge, kind).open_pull_request(head="autocoder/task-1-run-1", base="main", title="T", body="")
    forge.set_state("team/app", 1, "merged")
    body, headers = forge.webhook(kind, "team/app", 1, secret="hook-secret")
    assert webhook_is_authentic(kind=kind, secret="hook-secret", body=body, headers=headers)
    assert not webhook_is_authentic(kind=kind, secret="another-secret", body=body, headers=headers)
    assert not webhook_is_authentic(kind=kind, secret="", body=body, headers=headers)
    assert not webhook_is_authentic(kind=kind, secret="hook-secret", body=body, headers={})
    # Not ASCII or not well formed: simply not authentic (compare_digest refuses non-ASCII str).
    name = next(n for n in headers if "Signature" in n or "Token" in n)
    for given in (headers[name] + "é", "☃" * len(headers[name]), headers[name][:-2]):
        assert not webhook_is_authentic(kind=kind, secret="hook-secret", body=body, headers={**headers, name: given})
    if kind != ForgeKind.GITLAB:  # GitLab sends the secret itself, not a signature of the body
        assert not webhook_is_authentic(kind=kind, secret="hook-secret", body=body + b" ", headers=headers)
    pull = webhook_pull_request(kind=kind, payload=json.loads(body))
    assert pull is not None and (pull.number, pull.state) == (1, PullRequestState.MERGED)
    assert webhook_delivery_id(kind=kind, headers=headers)


def test_webhooks_about_other_things_are_not_pull_requests() -> None:
    assert webhook_pull_request(kind=ForgeKind.GITHUB, payload={"ref": "refs/heads/main"}) is None
    assert webhook_pull_request(kind=ForgeKind.GITLAB, payload={"object_kind": "push"}) is None
    assert webhook_pull_request(kind=ForgeKind.GITEA, payload={"pull_request": {"number": "x"}}) is None


def test_a_forge_on_an_internal_address_is_not_called(forge: FakeForge, settings) -> None:  # type: ignore[no-untyped-def]
    settings.CLONE_ALLOWED_NETWORKS = []
    before = len(forge.requests)
    for api_url in (forge.api_url("github"), f"http://localhost:{forge.port}/github"):
        github = forge_client(kind=ForgeKind.GITHUB, api_url=api_url, repository="team/app", token=TOKEN)
        with pytest.raises(ForgeError) as error:
            github.pull_request(1)
        assert error.value.code == "forge_host_not_allowed" and "internal address" in error.value.message
    assert len(forge.requests) == before
    for api_url in ("ftp://forge.example/api", "/relative"):
        with pytest.raises(ForgeError) as bad:
            forge_client(kind=ForgeKind.GITHUB, api_url=api_url, repository="team/app", token=TOKEN).pull_request(1)
        assert bad.value.code == "forge_bad_url"


def test_the_request_goes_to_the_checked_address_with_the_name_kept(forge: FakeForge) -> None:
    # By name: the connection is made to the address the name resolved to, the Host
    # header still names the forge.
    github = forge_client(
        kind=ForgeKind.GITHUB, api_url=f"http://localhost:{forge.port}/github", repository="team/app", token=TOKEN
    )
    with pytest.raises(ForgeError):
        github.pull_request(1)  # no pull request 1 yet: a 404 from the fake, so it was reached
    assert forge.requests[-1].headers["Host"] == f"localhost:{forge.port}"
