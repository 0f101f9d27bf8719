"""A run's pull request: pushed to a real bare remote (git over a local path), opened on
the fake forge (a real HTTP server speaking GitHub's, GitLab's and Gitea's APIs), and
followed until the forge reports it merged (the task is Done) or closed (back it goes),
by webhook — signatures checked, replays ignored — or by polling."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from core.crypto import decrypt_secret
from pipelines.models import ForgeDelivery, PullRequest, RunStatus
from pipelines.pull_requests.poll import pull_requests_poll
from pipelines.pull_requests.services import PullRequestFailed, run_open_pull_request
from pipelines.runs.services import run_start
from pipelines.tests.pull_requests.conftest import TOKEN
from repos.models import Repository
from repos.services import repository_set_forge
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.fake_forge import FakeForge
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db


PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
FIX_CALC = ToolReply(
    name=EDITOR,
    input={"command": "str_replace", "path": "app/calc.py", "old_str": "return a - b", "new_str": "return a + b"},
)


def set_forge(linked: Repository, forge: FakeForge, remote: Path, kind: str, owner) -> Repository:  # type: ignore[no-untyped-def]
    forge.add_repository("team/calc", git_dir=remote)
    return repository_set_forge(
        repository=linked,
        user=owner,
        push_url=str(remote),
        forge_kind=kind,
        forge_api_url=forge.api_url(kind),
        forge_repository="team/calc",
        token=TOKEN,
    )


def awaiting_run(fake_llm, task, owner):  # type: ignore[no-untyped-def]
    fake_llm.script(
        ToolReply(input=PLAN), FIX_CALC, TextReply("Fixed add."), ToolReply(input={"pass": True, "findings": []})
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    return run


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("kind", ["github", "gitlab", "gitea"])
def test_open_then_merged_on_the_forge_moves_the_task_to_done(
    fake_llm, forge, linked, remote, task, owner, owner_client, client, kind
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    run = awaiting_run(fake_llm, task, owner)

    opened = owner_client.post(f"/api/runs/{run.pk}/pull-request")
    assert opened.status_code == 201, opened.json()
    body = opened.json()
    assert (body["number"], body["state"], body["head_branch"]) == (1, "open", run.branch)
    assert body["url"] == forge.html_url(kind, "team/calc", 1)
    # The branch is on the remote; the forge got the task, plan, review, tests and cost.
    assert git(remote, "rev-parse", run.branch) == git(linked_path(repository), "rev-parse", run.branch)
    pull = forge.repositories["team/calc"].pulls[1]
    assert pull.title == task.title and pull.base == "main"
    for words in ("## Plan", "Fix add", "## Review", "passed", "## Tests", f"run 1 of task #{task.pk}", "$"):
        assert words in pull.body, words
    assert TOKEN not in opened.content.decode()
    # Opening again gives the same one.
    again = owner_client.post(f"/api/runs/{run.pk}/pull-request")
    assert again.status_code == 200 and again.json()["number"] == 1 and len(forge.repositories["team/calc"].pulls) == 1

    # Merged on the forge; the webhook says so.
    forge.set_state("team/calc", 1, "merged")
    delivery, headers = forge.webhook(
        kind, "team/calc", 1, secret=decrypt_secret(repository.forge_webhook_secret_encrypted)
    )
    hook = f"/api/forges/webhooks/{repository.pk}"
    answer = client.post(hook, delivery, content_type="application/json", **http_headers(headers))
    assert answer.status_code == 200 and answer.json()["outcome"] == "applied"
    run.refresh_from_db()
    task.refresh_from_db()
    assert run.status == RunStatus.APPROVED and task.status == "done"
    assert run.merge_result["via"] == "pull_request" and PullRequest.objects.get().state == "merged"
    # The task page says where it was merged (it said "as ." with no commit).
    client.force_login(owner)
    page = client.get(f"/tasks/{task.pk}").content.decode()
    assert "Merged on the forge" in page and forge.html_url(kind, "team/calc", 1) in page
    assert "as <code></code>" not in page
    client.logout()
    # The same delivery again changes nothing.
    replay = client.post(hook, delivery, content_type="application/json", **http_headers(headers))
    assert replay.status_code == 200 and replay.json()["outcome"] == "replayed"


def linked_path(repository: Repository) -> Path:
    return Path(repository.path)


def http_headers(headers: dict[str, str]) -> dict[str, str]:
    return {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()}


def test_a_bad_signature_changes_nothing(fake_llm, forge, linked, remote, task, owner, client) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    forge.set_state("team/calc", 1, "merged")
    delivery, headers = forge.webhook("github", "team/calc", 1, secret="not-the-secret")
    hook = f"/api/forges/webhooks/{repository.pk}"
    refused = client.post(hook, delivery, content_type="application/json", **http_headers(headers))
    assert refused.status_code == 401 and refused.json()["code"] == "webhook_refused"
    assert client.post(hook, delivery, content_type="application/json").status_code == 401  # unsigned
    assert client.post("/api/forges/webhooks/999999", delivery, content_type="application/json").status_code == 404
    assert client.post("/api/forges/webhooks/x", delivery, content_type="application/json").status_code == 404
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL


def test_closed_unmerged_found_by_polling_sends_the_task_back(fake_llm, forge, linked, remote, task, owner) -> None:  # type: ignore[no-untyped-def]
    set_forge(linked, forge, remote, "gitea", owner)
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    assert pull_requests_poll(older_than_seconds=0) == 1  # still open: nothing changes
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL
    forge.set_state("team/calc", 1, "closed")
    assert pull_requests_poll(older_than_seconds=0) == 1
    run.refresh_from_db()
    task.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and task.status != "review"
    assert PullRequest.objects.get().state == "closed"
    assert pull_requests_poll(older_than_seconds=0) == 0  # closed ones are not asked about again


def test_failures_say_what_to_do_and_lose_nothing(fake_llm, forge, linked, remote, task, owner, owner_client) -> None:  # type: ignore[no-untyped-def]
    run = awaiting_run(fake_llm, task, owner)
    no_forge = owner_client.post(f"/api/runs/{run.pk}/pull-request")
    assert no_forge.status_code == 400 and "Pull requests" in no_forge.json()["message"]

    set_forge(linked, forge, remote, "github", owner)
    forge.tokens.clear()  # the token was revoked on the forge
    refused = owner_client.post(f"/api/runs/{run.pk}/pull-request")
    assert refused.status_code == 400
    assert refused.json()["extra"] == {"reason": "forge_token_refused", "retryable": False}
    forge.add_token(TOKEN)
    forge.fail_next = [503]
    down = owner_client.post(f"/api/runs/{run.pk}/pull-request")
    assert down.status_code == 503 and down.json()["extra"]["retryable"] is True
    assert "Try again later; the branch stays pushed" in down.json()["message"]
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL and not PullRequest.objects.exists()
    assert git(remote, "rev-parse", run.branch)  # pushed, kept
    assert owner_client.post(f"/api/runs/{run.pk}/pull-request").status_code == 201  # retried: works


def test_another_user_can_neither_open_nor_see_it(fake_llm, forge, linked, remote, task, owner, other_client) -> None:  # type: ignore[no-untyped-def]
    set_forge(linked, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    assert other_client.post(f"/api/runs/{run.pk}/pull-request").status_code == 404
    run_open_pull_request(run=run, actor=owner)
    assert other_client.get(f"/api/runs/{run.pk}/pull-request").status_code == 404
    assert len(forge.repositories["team/calc"].pulls) == 1


def test_a_run_not_awaiting_approval_cannot_open_one(fake_llm, forge, linked, remote, task, owner) -> None:  # type: ignore[no-untyped-def]
    set_forge(linked, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    from pipelines.runs.services import run_cancel

    run = run_cancel(run=run, actor=owner)
    with pytest.raises(Exception) as error:
        run_open_pull_request(run=run, actor=owner)
    assert "awaiting approval" in str(error.value)
    assert not isinstance(error.value, PullRequestFailed) and not forge.requests


def test_from_the_pages(fake_llm, forge, linked, remote, task, owner, client) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    client.force_login(owner)
    settings_page = client.get(f"/projects/{task.project_id}/repository").content.decode()
    secret = decrypt_secret(repository.forge_webhook_secret_encrypted)
    assert f"/api/forges/webhooks/{repository.pk}" in settings_page and secret in settings_page
    assert TOKEN not in settings_page

    page = client.get(f"/tasks/{task.pk}").content.decode()
    assert "Open pull request" in page
    opened = client.post(f"/runs/{run.pk}/pull-request", follow=True).content.decode()
    assert "Pull request #1 is open on the forge" in opened
    assert forge.html_url("github", "team/calc", 1) in opened and "Open pull request" not in opened
    board = client.get("/").content.decode()
    assert "PR #1 · open" in board
    # Merged on the forge: the card says so, in the Done column.
    forge.set_state("team/calc", 1, "merged")
    pull_requests_poll(older_than_seconds=0)
    task.refresh_from_db()
    assert task.status == "done" and task.pipeline_state["pull_request"]["state"] == "merged"
    assert "PR #1 · merged" in client.get(f"/tasks/{task.pk}/card").content.decode()


def test_other_users_do_not_see_the_webhook_secret(forge, linked, remote, owner, other_user, client) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, "github", owner)
    client.force_login(other_user)
    assert client.get(f"/projects/{repository.project_id}/repository").status_code == 404


SIGNATURE_HEADER = {"github": "X-Hub-Signature-256", "gitea": "X-Gitea-Signature", "gitlab": "X-Gitlab-Token"}
DELIVERY_HEADER = {"github": "X-GitHub-Delivery", "gitea": "X-Gitea-Delivery", "gitlab": "X-Gitlab-Event-UUID"}


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_a_signature_not_ascii_or_not_well_formed_is_refused_like_a_bad_one(
    fake_llm, forge, linked, remote, task, owner, client, kind
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    forge.set_state("team/calc", 1, "closed")
    secret = decrypt_secret(repository.forge_webhook_secret_encrypted)
    delivery, headers = forge.webhook(kind, "team/calc", 1, secret=secret)
    hook = f"/api/forges/webhooks/{repository.pk}"
    name = SIGNATURE_HEADER[kind]
    right = headers[name]
    wrong = right[:-1] + ("1" if right.endswith("0") else "0")
    bad_signature = client.post(
        hook, delivery, content_type="application/json", **http_headers({**headers, name: wrong})
    )
    assert bad_signature.status_code == 401
    for given in (right + "é", "é" * len(right), right[:-1] + "\u00ff", "sha256=☃", "sha256=", "sha256", " " + right):
        answer = client.post(hook, delivery, content_type="application/json", **http_headers({**headers, name: given}))
        assert (answer.status_code, answer.json()) == (401, bad_signature.json()), given
    if kind == "gitea":  # Forgejo's name for the same header
        forgejo = {k: v for k, v in headers.items() if k != name} | {"X-Forgejo-Signature": "é" + right}
        answer = client.post(hook, delivery, content_type="application/json", **http_headers(forgejo))
        assert answer.status_code == 401
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL and PullRequest.objects.get().state == "open"
    # The right one is still applied, once.
    applied = client.post(hook, delivery, content_type="application/json", **http_headers(headers))
    assert applied.json()["outcome"] == "applied"
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_a_captured_delivery_sent_again_with_another_or_no_delivery_id_is_a_replay(
    fake_llm, forge, linked, remote, task, owner, client, kind
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(linked, forge, remote, kind, owner)
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    secret = decrypt_secret(repository.forge_webhook_secret_encrypted)
    hook = f"/api/forges/webhooks/{repository.pk}"

    def post(delivery: bytes, headers: dict[str, str]) -> str:
        answer = client.post(hook, delivery, content_type="application/json", **http_headers(headers))
        assert answer.status_code == 200, answer.content
        return str(answer.json()["outcome"])

    forge.set_state("team/calc", 1, "closed")
    closed, closed_headers = forge.webhook(kind, "team/calc", 1, secret=secret)
    assert post(closed, closed_headers) == "applied"
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and PullRequest.objects.get().state == "closed"
    # Reopened on the forge: a new event, a new body.
    forge.set_state("team/calc", 1, "open")
    reopened, reopened_headers = forge.webhook(kind, "team/calc", 1, secret=secret)
    assert post(reopened, reopened_headers) == "applied"
    assert PullRequest.objects.get().state == "open"

    # Someone who captured the "closed" delivery sends it again: the delivery id is not
    # signed, so it comes with a new one, or none.
    delivery_header = DELIVERY_HEADER[kind]
    new_id = {**closed_headers, delivery_header: "a-new-delivery-id"}
    no_id = {name: value for name, value in closed_headers.items() if name != delivery_header}
    for headers in (closed_headers, new_id, no_id):
        assert post(closed, headers) == "replayed"
    assert PullRequest.objects.get().state == "open"
    # Per repository: each delivery applied once.
    assert ForgeDelivery.objects.filter(repository=repository).count() == 2
