"""Forge issues, the client side (against the fake forge, a real HTTP server speaking
GitHub's, GitLab's and Gitea's issue endpoints) and the repository's settings of which
issues become tasks (the page, the API, the admin)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llm.demo.forge.issues import FakeIssue
from llm.demo.forge.state import FakePull
from repos.forges import ForgeError, ForgeKind, forge_client
from repos.forges.issues import (
    BODY_MAX_CHARS,
    commit_web_url,
    forge_account_login,
    issue_close,
    issues_list,
    webhook_issue,
)
from repos.models import Repository
from repos.tests import test_forge_settings
from repos.tests.test_forge_settings import PUBLIC_API, TOKEN, a_bare_remote, forge_url
from tests.fake_forge import FakeForge

# The linked repository of the settings tests (fixtures).
repo, linked = test_forge_settings.repo, test_forge_settings.linked

KINDS = [ForgeKind.GITHUB, ForgeKind.GITLAB, ForgeKind.GITEA]


@pytest.fixture
def forge(settings) -> Iterator[FakeForge]:  # type: ignore[no-untyped-def]
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    server = FakeForge().start()
    server.add_repository("team/app")
    server.add_token(TOKEN)
    yield server
    server.stop()


def client(forge: FakeForge, kind: str):  # type: ignore[no-untyped-def]
    return forge_client(kind=kind, api_url=forge.api_url(kind), repository="team/app", token=TOKEN)


def add(forge: FakeForge, number: int, **fields) -> FakeIssue:  # type: ignore[no-untyped-def]
    issue = FakeIssue(number=number, **{"title": f"Issue {number}", "body": "", **fields})
    forge.repositories["team/app"].issues[number] = issue
    return issue


@pytest.mark.parametrize("kind", KINDS)
def test_issues_listed_by_label_or_assignee_since_a_stamp(forge: FakeForge, kind: str) -> None:
    add(forge, 1, labels=["autocoder"], body="x" * (BODY_MAX_CHARS + 10))
    add(forge, 2, labels=["question"], assignees=["bot"])
    add(forge, 3, labels=["autocoder"], state="closed", updated_at="2020-01-01T00:00:00+00:00")
    labelled = {issue.number: issue for issue in issues_list(client(forge, kind), label="autocoder")}
    assert sorted(labelled) == [1, 3]
    assert labelled[1].labels == ("autocoder",) and len(labelled[1].body) == BODY_MAX_CHARS
    assert (labelled[1].state, labelled[3].state) == ("open", "closed")
    assert labelled[1].url.endswith(("/issues/1", "/-/issues/1"))
    assigned = issues_list(client(forge, kind), assignee="bot")
    assert [(i.number, i.assignees) for i in assigned] == [(2, ("bot",))]
    since = issues_list(client(forge, kind), label="autocoder", since="2021-01-01T00:00:00Z")
    assert [issue.number for issue in since] == [1]


@pytest.mark.parametrize("kind", KINDS)
def test_pull_requests_in_the_list_are_not_issues_and_pages_are_followed(forge: FakeForge, kind: str) -> None:
    # GitHub's issues list holds pull requests too (with a pull_request key): left out.
    forge.repositories["team/app"].pulls[1] = FakePull(number=1, head="b", base="main", title="A pull", body="")
    for number in range(2, 2 + 60):  # more than one page
        add(forge, number)
    found = issues_list(client(forge, kind))
    assert sorted(issue.number for issue in found) == list(range(2, 62))
    pages = [r.path for r in forge.requests if "/issues?" in r.path]
    assert len(pages) == 2 and "page=2" in pages[1]
    if kind == ForgeKind.GITEA:
        assert "type=issues" in pages[0]


@pytest.mark.parametrize("kind", KINDS)
def test_the_tokens_login_and_closing_with_a_comment(forge: FakeForge, kind: str) -> None:
    forge.logins[TOKEN] = "the-bot"
    assert forge_account_login(client(forge, kind)) == "the-bot"
    issue = add(forge, 4)
    issue_close(client(forge, kind), 4, comment="Merged as abc.")
    assert (issue.state, issue.comments) == ("closed", ["Merged as abc."])
    forge.fail_next = [503]
    with pytest.raises(ForgeError) as failed:
        issue_close(client(forge, kind), 4, comment="again")
    assert failed.value.retryable


def test_a_merged_pull_request_saying_closes_n_closes_issue_n_on_the_fake_forge(forge: FakeForge) -> None:
    kept, closed = add(forge, 1), add(forge, 2)
    forge.repositories["team/app"].pulls[3] = FakePull(
        number=3, head="b", base="main", title="Fix", body="Text.\n\nCloses #2"
    )
    forge.set_state("team/app", 3, "closed")
    assert closed.state == "open"  # closed unmerged: nothing
    forge.set_state("team/app", 3, "merged")
    assert (kept.state, closed.state) == ("open", "closed")


def test_webhook_issues_of_each_forge() -> None:
    github = {
        "action": "labeled",
        "issue": {
            "number": 7,
            "title": "T",
            "body": None,
            "state": "open",
            "html_url": "https://github.com/team/app/issues/7",
            "labels": [{"name": "autocoder"}],
            "assignees": [{"login": "bot"}],
            "updated_at": "2026-11-27T01:00:00Z",
        },
    }
    issue = webhook_issue(kind=ForgeKind.GITHUB, event="issues", payload=github)
    assert issue is not None and (issue.number, issue.body, issue.labels, issue.assignees) == (
        7,
        "",
        ("autocoder",),
        ("bot",),
    )
    assert webhook_issue(kind=ForgeKind.GITHUB, event="pull_request", payload=github) is None
    scripted = {**github, "issue": {**github["issue"], "html_url": "javascript:alert(1)"}}
    assert webhook_issue(kind=ForgeKind.GITEA, event="issues", payload=scripted).url == ""  # type: ignore[union-attr]
    pull = {**github, "issue": {**github["issue"], "pull_request": {"url": "…"}}}
    assert webhook_issue(kind=ForgeKind.GITEA, event="issues", payload=pull) is None
    gitlab = {
        "object_kind": "issue",
        "object_attributes": {"iid": 8, "title": "T", "description": "D", "state": "closed", "url": "u"},
        "labels": [{"title": "autocoder"}],
        "assignees": [{"username": "bot"}],
    }
    issue = webhook_issue(kind=ForgeKind.GITLAB, event="issue", payload=gitlab)
    assert issue is not None and (issue.number, issue.state, issue.labels, issue.assignees) == (
        8,
        "closed",
        ("autocoder",),
        ("bot",),
    )
    assert webhook_issue(kind=ForgeKind.GITLAB, event="issue", payload={"object_kind": "issue"}) is None


def test_commit_links_from_issue_links() -> None:
    assert (
        commit_web_url(kind="github", issue_url="https://github.com/team/app/issues/3", commit="abc")
        == "https://github.com/team/app/commit/abc"
    )
    assert (
        commit_web_url(kind="gitlab", issue_url="https://gitlab.com/g/s/app/-/issues/3", commit="abc")
        == "https://gitlab.com/g/s/app/-/commit/abc"
    )
    assert commit_web_url(kind="gitea", issue_url="javascript:alert(1)/issues/3", commit="abc") == ""


@pytest.mark.django_db
def test_the_settings_over_the_api_page_and_admin(
    owner_client, client, admin_client, owner, project, repo: Path, linked: Repository
) -> None:  # type: ignore[no-untyped-def]
    bare = a_bare_remote(owner_client, project, repo)
    body = {
        "push_url": f"file://{bare}",
        "forge_kind": "github",
        "forge_api_url": PUBLIC_API,
        "forge_repository": "team/app",
        "token": TOKEN,
        "forge_issue_label": " autocoder ",
        "forge_issue_assigned": True,
    }
    saved = owner_client.put(forge_url(project), body, format="json")
    assert saved.status_code == 200, saved.json()
    assert (saved.json()["forge_issue_label"], saved.json()["forge_issue_assigned"]) == ("autocoder", True)
    Repository.objects.filter(pk=linked.pk).update(forge_login="the-bot", forge_issues_since="2026-11-27T00:00:00Z")
    # Absent: kept; a new token forgets the login learned with the old one.
    rest = {k: v for k, v in body.items() if not k.startswith("forge_issue")}
    assert owner_client.put(forge_url(project), {**rest, "token": None}, format="json").status_code == 200
    linked.refresh_from_db()
    assert (linked.forge_issue_label, linked.forge_issue_assigned, linked.forge_login) == ("autocoder", True, "the-bot")
    assert linked.forge_issues_since == "2026-11-27T00:00:00Z"  # the same issues wanted: the poll goes on
    assert owner_client.put(forge_url(project), {**rest, "token": "another"}, format="json").status_code == 200
    linked.refresh_from_db()
    assert linked.forge_login == ""
    for bad in ({"forge_issue_label": "a,b"}, {"forge_issue_label": None}, {"forge_issue_assigned": "yes"}):
        refused = owner_client.put(forge_url(project), {**rest, **bad}, format="json")
        assert refused.status_code == 400 and next(iter(bad)) in refused.json()["extra"]["fields"], bad

    client.force_login(owner)
    page = client.get(f"/projects/{project.pk}/repository").content.decode()
    assert 'name="forge_issue_label"' in page and 'value="autocoder"' in page
    assert "Statuses, Issues, content type" in page  # the webhook's events to tick
    form = {
        "push_url": f"file://{bare}",
        "forge_kind": "github",
        "forge_api_url": PUBLIC_API,
        "forge_repository": "team/app",
        "forge_issue_label": "ai",
    }
    assert client.post(f"/projects/{project.pk}/repository/forge", form).status_code == 302
    linked.refresh_from_db()
    assert (linked.forge_issue_label, linked.forge_issue_assigned) == ("ai", False)
    assert linked.forge_issues_since == ""  # another label: the next poll reads every issue again
    assert admin_client.get(f"/admin/repos/repository/{linked.pk}/change/").content.count(b"forge_issue_label") >= 1
