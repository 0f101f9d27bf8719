# ruff: noqa: F811 (the fixtures imported from the forge tests are parameters here)
"""A commit's CI read from each forge (repos.forges.checks) against the fake forge: GitHub
check runs and commit statuses, GitLab pipelines, jobs and traces, Gitea statuses; job log
tails bounded; GitHub's log redirect followed once, checked, without the token; merging;
and the repository's CI settings on the API and the page."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llm.demo.forge.checks import ci, set_checks
from llm.demo.forge.pulls import open_by_hand
from repos.forges import ForgeError, ForgeKind, webhook_event, webhook_is_authentic
from repos.forges.checks import (
    FAILED,
    LOG_TAIL_BYTES,
    PASSED,
    PENDING,
    checks_read,
    log_tail,
    pull_request_merge,
    webhook_checks_sha,
)
from repos.models import Repository
from repos.tests.test_forge_settings import forge_url, linked, repo  # noqa: F401 (fixtures)
from repos.tests.test_forges import KINDS, TOKEN, client, forge  # noqa: F401 (fixtures)
from tests.fake_forge import FakeForge

BRANCH = "autocoder/task-1-run-1"
LONG_LOG = "".join(f"step {i}: ok\n" for i in range(3000)) + "E   assert 2 + 3 == 6"


def head(forge: FakeForge) -> str:
    git_dir = forge.repositories["team/app"].git_dir
    return subprocess.run(
        ["git", "rev-parse", BRANCH], cwd=git_dir, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.parametrize("kind", KINDS)
def test_each_forge_s_checks_with_the_failed_one_s_log_tail(forge: FakeForge, settings, kind: str) -> None:
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    open_by_hand(forge, "team/app", BRANCH, "main", "A change")
    checks = [
        {"name": "unit", "state": "failed", "log": LONG_LOG},
        {"name": "lint", "state": "passed", "via": "status"},
        {"name": "e2e", "state": "pending"},
    ]
    sha, _, _ = set_checks(forge, kind, "team/app", checks, number=1)
    assert sha == head(forge)

    found = {check.name: check for check in checks_read(client(forge, kind), sha=sha, number=1)}
    assert {name: check.state for name, check in found.items()} == {"unit": FAILED, "lint": PASSED, "e2e": PENDING}
    assert all(check.url.startswith("http://127.0.0.1:") for check in found.values())
    tail = found["unit"].log_tail
    assert tail.endswith("E   assert 2 + 3 == 6")
    if kind == ForgeKind.GITEA:  # a status's description: its last line only
        assert tail == "E   assert 2 + 3 == 6"
    else:  # the log's last lines, at most LOG_TAIL_BYTES, cut at a line's start
        assert len(tail.encode()) <= LOG_TAIL_BYTES and "step 2999: ok" in tail and "step 10: ok" not in tail
        assert tail.splitlines()[0].startswith("step ")
    assert not found["lint"].log_tail and not found["e2e"].log_tail


def test_github_s_log_redirect_is_followed_without_the_token(forge: FakeForge, settings) -> None:
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    open_by_hand(forge, "team/app", BRANCH, "main", "A change")
    sha, _, _ = set_checks(forge, "github", "team/app", [{"name": "unit", "state": "failed", "log": "boom"}], number=1)
    [check] = checks_read(client(forge, "github"), sha=sha)
    assert check.log_tail == "boom"
    api = next(r for r in forge.requests if r.path.endswith("/logs"))
    download = next(r for r in forge.requests if r.path.startswith("/_downloads/"))
    assert api.headers["Authorization"] == f"Bearer {TOKEN}"
    assert "Authorization" not in download.headers and TOKEN not in str(download.headers)
    assert download.headers["Host"].startswith("localhost:")  # another host: the same check applied


def test_a_log_redirect_to_an_address_not_allowed_is_not_followed(forge: FakeForge, settings) -> None:
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    ci(forge).log_host = "127.0.0.2"  # loopback, outside the allowed network
    open_by_hand(forge, "team/app", BRANCH, "main", "A change")
    sha, _, _ = set_checks(forge, "github", "team/app", [{"name": "unit", "state": "failed", "log": "x"}], number=1)
    [check] = checks_read(client(forge, "github"), sha=sha)
    assert (check.state, check.log_tail) == (FAILED, "")
    assert not any(r.path.startswith("/_downloads/") for r in forge.requests)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_forge_is_a_retryable_error(forge: FakeForge, kind: str) -> None:
    open_by_hand(forge, "team/app", BRANCH, "main", "A change")
    sha, _, _ = set_checks(forge, kind, "team/app", [{"name": "unit", "state": "passed"}], number=1)
    ci(forge).down = 1
    with pytest.raises(ForgeError) as failed:
        checks_read(client(forge, kind), sha=sha, number=1)
    assert failed.value.retryable and failed.value.code == "forge_unavailable"
    assert [c.state for c in checks_read(client(forge, kind), sha=sha, number=1)] == [PASSED]


@pytest.mark.parametrize("kind", KINDS)
def test_merge_only_the_head_that_passed(forge: FakeForge, kind: str) -> None:
    open_by_hand(forge, "team/app", BRANCH, "main", "A change")
    with pytest.raises(ForgeError) as moved:
        pull_request_merge(client(forge, kind), number=1, sha="0" * 40)
    assert moved.value.status == 409 and forge.repositories["team/app"].pulls[1].state == "open"
    pull_request_merge(client(forge, kind), number=1, sha=head(forge))
    assert forge.repositories["team/app"].pulls[1].state == "merged"
    with pytest.raises(ForgeError):
        pull_request_merge(client(forge, kind, token="read-only"), number=1, sha=head(forge))


def test_log_tail_is_bounded_and_cut_at_a_line() -> None:
    assert log_tail("a\nb\nc") == "a\nb\nc"
    tail = log_tail(("x" * 100 + "\n") * 200)
    assert len(tail.encode()) <= LOG_TAIL_BYTES and all(line == "x" * 100 for line in tail.splitlines())
    assert log_tail(b"\xff\xfe end").endswith("end")  # not UTF-8: replaced, not an error


@pytest.mark.parametrize(
    ("kind", "event", "payload", "sha"),
    [
        ("github", "check_run", {"check_run": {"head_sha": "abc123"}}, "abc123"),
        ("github", "check_suite", {"check_suite": {"head_sha": "abc123"}}, "abc123"),
        ("github", "status", {"sha": "abc123"}, "abc123"),
        ("github", "pull_request", {"sha": "abc123"}, None),
        ("gitlab", "pipeline", {"object_attributes": {"sha": "abc123"}}, "abc123"),
        ("gitlab", "merge_request", {"object_attributes": {"sha": "abc123"}}, None),
        ("gitea", "status", {"sha": "abc123"}, "abc123"),
        ("gitea", "check_run", {"check_run": {"head_sha": "abc123"}}, None),
        ("github", "status", {"sha": "../../etc"}, None),
        ("github", "status", {"sha": 42}, None),
    ],
)
def test_the_commit_a_ci_delivery_is_about(kind: str, event: str, payload: dict, sha: str | None) -> None:  # type: ignore[type-arg]
    assert webhook_checks_sha(kind=kind, event=event, payload=payload) == sha


@pytest.mark.django_db
def test_ci_settings_over_the_api(owner_client, project, linked, settings) -> None:  # type: ignore[no-untyped-def]
    settings.CI_FIX_ROUNDS_MAX = 3
    shown = owner_client.get(f"/api/projects/{project.pk}/repository").json()
    assert (shown["ci_required_checks"], shown["ci_fix_rounds_max"], shown["ci_fix_rounds_limit"]) == ([], None, 3)
    body = {"ci_required_checks": ["unit", "lint", "unit"], "ci_fix_rounds_max": 1, "merge_when_green": True}
    saved = owner_client.put(forge_url(project), body, format="json")
    assert saved.status_code == 200, saved.json()
    data = saved.json()
    assert (data["ci_required_checks"], data["ci_fix_rounds_max"], data["ci_fix_rounds_limit"]) == (
        ["unit", "lint"],
        1,
        1,
    )
    assert data["merge_when_green"] is True
    # Absent: kept.
    kept = owner_client.put(forge_url(project), {}, format="json").json()
    assert (kept["ci_required_checks"], kept["ci_fix_rounds_max"], kept["merge_when_green"]) == (
        ["unit", "lint"],
        1,
        True,
    )
    for bad, field in [
        ({"ci_fix_rounds_max": -1}, "ci_fix_rounds_max"),
        ({"ci_fix_rounds_max": 21}, "ci_fix_rounds_max"),
        ({"ci_fix_rounds_max": "many"}, "ci_fix_rounds_max"),
        ({"ci_required_checks": "unit"}, "ci_required_checks"),
        ({"ci_required_checks": ["x" * 201]}, "ci_required_checks"),
        ({"ci_required_checks": [f"c{i}" for i in range(51)]}, "ci_required_checks"),
        ({"ci_required_checks": ["   "]}, "ci_required_checks"),
        ({"merge_when_green": "perhaps"}, "merge_when_green"),
    ]:
        refused = owner_client.put(forge_url(project), bad, format="json")
        assert refused.status_code == 400, bad
        assert field in refused.json()["extra"]["fields"], (bad, refused.json())
    linked.refresh_from_db()
    assert (linked.ci_required_checks, linked.ci_fix_rounds_max, linked.merge_when_green) == (["unit", "lint"], 1, True)
    # null: the server's default again.
    back = owner_client.put(forge_url(project), {"ci_fix_rounds_max": None}, format="json").json()
    assert (back["ci_fix_rounds_max"], back["ci_fix_rounds_limit"]) == (None, 3)


@pytest.mark.django_db
def test_ci_settings_on_the_page_and_the_admin(client, owner, project, linked, admin_client) -> None:  # type: ignore[no-untyped-def]
    client.force_login(owner)
    page = client.get(f"/projects/{project.pk}/repository").content.decode()
    assert 'name="ci_required_checks"' in page and 'name="ci_fix_rounds_max"' in page
    assert 'name="merge_when_green"' in page
    form = {
        "forge_kind": "",
        "ci_required_checks": "unit\nlint, e2e\n\n",
        "ci_fix_rounds_max": "2",
        "merge_when_green": "on",
    }
    saved = client.post(f"/projects/{project.pk}/repository/forge", form, follow=True)
    assert saved.status_code == 200
    linked.refresh_from_db()
    assert (linked.ci_required_checks, linked.ci_fix_rounds_max, linked.merge_when_green) == (
        ["unit", "lint", "e2e"],
        2,
        True,
    )
    page = client.get(f"/projects/{project.pk}/repository").content.decode()
    assert "unit\nlint\ne2e</textarea>" in page
    refused = client.post(f"/projects/{project.pk}/repository/forge", {**form, "ci_fix_rounds_max": "99"})
    assert refused.status_code == 400
    linked.refresh_from_db()
    assert linked.ci_fix_rounds_max == 2
    admin_page = admin_client.get(f"/admin/repos/repository/{linked.pk}/change/").content.decode()
    assert 'name="merge_when_green"' in admin_page and 'name="ci_fix_rounds_max"' in admin_page
    assert isinstance(Repository.objects.get().ci_required_checks, list)


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[bytes, Any]]]]:
    """A webhook endpoint that keeps what it is sent."""
    received: list[tuple[bytes, Any]] = []

    class Keep(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((body, self.headers))  # case-insensitive, as Django's request.headers
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Keep)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()
    server.server_close()


def control(forge: FakeForge, body: dict) -> tuple[int, dict]:  # type: ignore[type-arg]
    request = urllib.request.Request(
        f"http://127.0.0.1:{forge.port}/_control/checks", json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("kind", KINDS)
def test_the_control_plays_ci_and_delivers_the_signed_event(forge: FakeForge, receiver, kind: str) -> None:  # type: ignore[no-untyped-def]
    url, received = receiver
    open_by_hand(forge, "team/app", BRANCH, "main", "A change")
    checks = [{"name": "unit", "state": "failed", "log": "boom"}]
    status, answer = control(
        forge,
        {"kind": kind, "repository": "team/app", "number": 1, "checks": checks, "webhook": url, "secret": "s3"},
    )
    assert (status, answer["webhook_status"], answer["sha"]) == (200, 200, head(forge))
    [(body, headers)] = received
    assert webhook_is_authentic(kind=kind, secret="s3", body=body, headers=headers)
    payload = json.loads(body)
    event = webhook_event(kind=kind, headers=headers, payload=payload)
    assert webhook_checks_sha(kind=kind, event=event, payload=payload) == head(forge)
    [check] = checks_read(client(forge, kind), sha=answer["sha"], number=1)
    assert (check.name, check.state) == ("unit", FAILED)
    # A request it cannot play is a 400 that says what it needs.
    assert control(forge, {"kind": kind, "repository": "team/app", "checks": checks})[0] == 400
    assert control(forge, {"kind": kind, "repository": "team/app", "sha": "abc", "checks": "unit"})[0] == 400


@pytest.mark.parametrize("kind", KINDS)
def test_every_page_of_a_commit_s_checks_is_read(forge: FakeForge, settings, kind: str) -> None:
    # A monorepo's pull request with more checks than one page holds (100; Gitea's 50):
    # the one that failed is on the last page.
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    open_by_hand(forge, "team/app", BRANCH, "main", "A change")
    checks = [{"name": f"shard-{i:03}", "state": "passed"} for i in range(130)]
    checks.append({"name": "last-shard", "state": "failed", "log": "E   boom"})
    sha, _, _ = set_checks(forge, kind, "team/app", checks, number=1)

    found = {check.name: check.state for check in checks_read(client(forge, kind), sha=sha, number=1)}
    assert len(found) == 131 and found["last-shard"] == FAILED
    listings = [r.path for r in forge.requests if r.path.split("?")[0].endswith(("/check-runs", "/status", "/jobs"))]
    assert any("page=2" in path for path in listings)
    assert not any("page=5" in path for path in listings)  # stopped when the forge named no next page


def test_a_forge_that_sends_no_link_header_is_read_while_its_pages_come_back_full(forge: FakeForge) -> None:
    # A proxy in front of a forge may drop the Link header: full pages then mean "more".
    from repos.forges.client import GitHub

    class NoLinks(GitHub):
        page_size_max = 7

        def _send(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            response = super()._send(*args, **kwargs)
            del response.headers["link"]
            return response

    for i in range(16):
        open_by_hand(forge, "team/app", f"branch-{i}", "main", f"Change {i}")
    real = client(forge, "github")
    no_links = NoLinks(api_url=real.api_url, repository="team/app", token=TOKEN)
    assert len(no_links.call_pages("/repos/team/app/pulls")) == 16
    pages = [r.path for r in forge.requests if r.path.startswith("/github/repos/team/app/pulls?")]
    assert len(pages) == 3 and "page=3" in pages[-1]
