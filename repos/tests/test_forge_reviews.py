"""Reviews on the forges, read through their APIs (the fake forge speaks GitHub's, Gitea's
and GitLab's shapes): line comments with their file, lines and side; who may write; the
token's own login; and the repository's trust setting on the page and the API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm.demo.forge.reviews import add_collaborator, add_review, reviews_state
from llm.demo.forge.state import FakePull
from repos.forges import ForgeError, forge_client
from repos.forges.reviews import (
    CHANGES_REQUESTED,
    ReplyTarget,
    commenter_may_write,
    own_login,
    reply_post,
    reviews_list,
)
from repos.models import Repository
from repos.services.forge_trust import LOGINS_BAD, LOGINS_REQUIRED, forge_commenter_trusted
from repos.tests.test_forge_settings import PUBLIC_API, forge_url, linked, repo  # noqa: F401 (fixtures)
from tests.fake_forge import FakeForge

pytestmark = pytest.mark.django_db

TOKEN = "forge-token-s3cr3t"
KINDS = ["github", "gitlab", "gitea"]
COMMENTS = [
    {"path": "app/x.py", "start_line": 4, "line": 6, "side": "RIGHT", "body": "Three lines"},
    {"path": "app/x.py", "line": 2, "side": "LEFT", "body": "Keep this removed line"},
]


@pytest.fixture
def forge(settings) -> Iterator[FakeForge]:  # type: ignore[no-untyped-def]
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    server = FakeForge().start()
    server.add_token(TOKEN)
    server.add_repository("team/app").pulls[1] = FakePull(number=1, head="b", base="main", title="t", body="")
    yield server
    server.stop()


def client_for(forge: FakeForge, kind: str):  # type: ignore[no-untyped-def]
    return forge_client(kind=kind, api_url=forge.api_url(kind), repository="team/app", token=TOKEN)


@pytest.mark.parametrize("kind", KINDS)
def test_a_review_is_read_with_its_comments_files_lines_and_sides(forge, kind) -> None:  # type: ignore[no-untyped-def]
    add_review(
        forge, repository="team/app", number=1, author="alice", state="CHANGES_REQUESTED", body="Fix", comments=COMMENTS
    )
    add_review(forge, repository="team/app", number=1, author="carol", state="APPROVED", body="", comments=[])
    client = client_for(forge, kind)
    found = reviews_list(client, 1)
    assert [review.author for review in found] == ["alice"]  # an approval asks for nothing
    review = found[0]
    assert review.body == "Fix" and review.author_id
    assert review.state == (CHANGES_REQUESTED if kind != "gitlab" else "COMMENTED")
    lines = {(c.path, c.line_start, c.line_end, c.side, c.body) for c in review.comments}
    # Gitea comments one line: a range is its last line.
    first = 6 if kind == "gitea" else 4
    assert lines == {("app/x.py", first, 6, "new", "Three lines"), ("app/x.py", 2, 2, "old", "Keep this removed line")}
    comment_ids = {c.comment_id for c in review.comments}
    assert comment_ids <= set(review.comment_ids) and all(comment_ids)
    if kind == "gitlab":
        # Notes already read are not read again: nothing new, no review.
        assert reviews_list(client, 1, seen=review.comment_ids) == []


@pytest.mark.parametrize("kind", KINDS)
def test_who_may_write_and_the_tokens_own_login(forge, kind, settings) -> None:  # type: ignore[no-untyped-def]
    add_collaborator(forge, "team/app", "alice", "write")
    add_collaborator(forge, "team/app", "rita", "read")
    data = reviews_state(forge)
    client = client_for(forge, kind)
    assert commenter_may_write(client, login="alice", user_id=str(data.user_id("alice"))) is True
    assert commenter_may_write(client, login="rita", user_id=str(data.user_id("rita"))) is False
    assert commenter_may_write(client, login="mallory", user_id=str(data.user_id("mallory"))) is False
    assert commenter_may_write(client, login="nobody-here", user_id="999999") is False
    assert own_login(client) == data.own_login
    forge.fail_next = [503]
    with pytest.raises(ForgeError) as failed:
        commenter_may_write(client, login="alice", user_id=str(data.user_id("alice")))
    assert failed.value.retryable


@pytest.mark.parametrize("kind", KINDS)
def test_a_reply_goes_on_the_comments_thread(forge, kind) -> None:  # type: ignore[no-untyped-def]
    add_review(
        forge, repository="team/app", number=1, author="alice", state="COMMENTED", body="", comments=COMMENTS[:1]
    )
    comment = reviews_list(client_for(forge, kind), 1)[0].comments[0]
    target = ReplyTarget(thread_id=comment.thread_id, author="alice", path="app/x.py", lines="lines 4–6", body="Three")
    assert reply_post(client_for(forge, kind), number=1, comment=target, body="Changed.")
    data = reviews_state(forge)
    if kind == "gitea":
        posted = data.issue_comments[("team/app", 1)][0]["body"]
        assert posted.startswith("> @alice on app/x.py, lines 4–6:\n> Three") and posted.endswith("Changed.")
    else:
        reply = next(c for c in data.comments[("team/app", 1)] if c.author == data.own_login)
        assert reply.body == "Changed."
        assert (reply.in_reply_to if kind == "github" else reply.discussion_id) == (
            int(comment.comment_id) if kind == "github" else comment.thread_id
        )


def test_trust_is_set_over_the_api_with_field_errors(owner_client, project, linked) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    body = {"forge_kind": "github", "forge_api_url": PUBLIC_API, "forge_repository": "team/app", "token": TOKEN}
    body["push_url"] = "https://93.184.215.14/team/app.git"
    saved = owner_client.put(
        forge_url(project),
        {**body, "forge_trusted_commenters": "list", "forge_trusted_logins": " alice,bob ,, dependabot[bot]"},
        format="json",
    )
    assert saved.status_code == 200, saved.json()
    assert saved.json()["forge_trusted_commenters"] == "list"
    assert saved.json()["forge_trusted_logins"] == "alice, bob, dependabot[bot]"
    linked.refresh_from_db()
    assert linked.forge_trusted_login_set == {"alice", "bob", "dependabot[bot]"}

    # Absent: kept, whatever else changes.
    assert owner_client.put(forge_url(project), body, format="json").json()["forge_trusted_commenters"] == "list"
    for bad, field, message in (
        ({"forge_trusted_commenters": "everyone"}, "forge_trusted_commenters", None),
        ({"forge_trusted_logins": "alice; rm -rf /"}, "forge_trusted_logins", LOGINS_BAD),
        ({"forge_trusted_commenters": "list", "forge_trusted_logins": ""}, "forge_trusted_logins", LOGINS_REQUIRED),
    ):
        refused = owner_client.put(forge_url(project), {**body, **bad}, format="json")
        assert refused.status_code == 400, bad
        errors = refused.json()["extra"]["fields"] if "extra" in refused.json() else refused.json()
        assert field in str(errors) and (message is None or message in str(errors)), refused.json()
    linked.refresh_from_db()
    assert (linked.forge_trusted_commenters, linked.forge_trusted_logins) == ("list", "alice, bob, dependabot[bot]")

    back = owner_client.put(forge_url(project), {**body, "forge_trusted_commenters": ""}, format="json")
    assert back.status_code == 200 and back.json()["forge_trusted_commenters"] == ""
    linked.refresh_from_db()
    assert linked.forge_trust == "collaborators"  # the server's default


def test_trust_on_the_page(client, owner, project, linked) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    client.force_login(owner)
    page = client.get(f"/projects/{project.pk}/repository").content.decode()
    assert 'name="forge_trusted_commenters"' in page and 'name="forge_trusted_logins"' in page
    form = {
        "push_url": "https://93.184.215.14/team/app.git",
        "forge_kind": "github",
        "forge_api_url": PUBLIC_API,
        "forge_repository": "team/app",
        "token": TOKEN,
        "forge_trusted_commenters": "list",
        "forge_trusted_logins": "alice",
    }
    saved = client.post(f"/projects/{project.pk}/repository/forge", form, follow=True)
    assert saved.status_code == 200 and b"Pull request settings saved." in saved.content
    linked.refresh_from_db()
    assert (linked.forge_trusted_commenters, linked.forge_trusted_logins) == ("list", "alice")
    refused = client.post(f"/projects/{project.pk}/repository/forge", {**form, "forge_trusted_logins": "<b>x</b>"})
    assert refused.status_code == 400 and LOGINS_BAD.encode() in refused.content
    assert b"<b>x</b>" not in refused.content  # escaped in the form


def test_collaborators_are_asked_once_then_kept(forge, linked, settings) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    add_collaborator(forge, "team/app", "alice", "write")
    linked.forge_kind = "github"
    client = client_for(forge, "github")
    assert forge_commenter_trusted(repository=linked, client=client, login="alice") is True
    asked = len(forge.requests)
    assert forge_commenter_trusted(repository=linked, client=client, login="alice") is True
    assert len(forge.requests) == asked  # kept for FORGE_TRUST_CACHE_SECONDS
    assert forge_commenter_trusted(repository=linked, client=client, login="") is False
    listed = Repository(pk=linked.pk, forge_trusted_commenters="list", forge_trusted_logins="Alice")
    assert forge_commenter_trusted(repository=listed, client=client, login="ALICE") is True
    assert forge_commenter_trusted(repository=listed, client=client, login="bob") is False
    assert len(forge.requests) == asked  # a list asks the forge nothing
