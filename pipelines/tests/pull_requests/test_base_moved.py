"""The base moved on while a run awaited approval. Approving it here merges the new base
into its branch first: cleanly → the tests and the review run again, then approval
merges; with a conflict → the Coder gets a round with both sides' hunks and what each
meant, resolves the markers committed on the branch, the tests pass, approval merges.
Markers left refuse the approval. The run's page says what was resolved and how."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from core.crypto import decrypt_secret
from llm.demo.forge.answers import signed_delivery
from llm.demo.forge.mergeability import set_conflicting
from llm.demo.forge.pulls import state_payload
from pipelines.models import FeedbackOrigin, PipelineRun, PullRequest, RunStatus
from pipelines.phases.verifying import MARKERS_LEFT_OUTPUT
from pipelines.pull_requests.poll import pull_requests_poll
from pipelines.pull_requests.services import run_open_pull_request
from pipelines.review.services import BaseMoved, MergeRefused, run_approve
from pipelines.runs.base_update import MARKERS_LEFT
from pipelines.tests.pull_requests.test_pull_requests import awaiting_run, git, http_headers, set_forge
from pipelines.tests.repositories import git_commit
from repos.models import BaseUpdate, Repository
from repos.services.base_update import REBASE_REFUSED_PUSHED
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

REVIEW_PASSES = ToolReply(input={"pass": True, "findings": []})
BASE_CALC = "def add(a, b):\n    return int(a) - int(b)\n"


def move_base(repo: Path, files: dict[str, str], message: str) -> str:
    """Someone else's commit lands on main."""
    for name, content in files.items():
        (repo / name).write_text(content)
    git(repo, "add", "-A")
    git_commit(repo, message)
    return git(repo, "rev-parse", "main")


@pytest.fixture
def tested(linked: Repository) -> Repository:
    linked.test_command = "python3 check.py"
    linked.save()
    return linked


def test_a_base_moved_without_conflict_is_merged_in_tested_again_then_approved(
    fake_llm, tested, repo_root, task, owner, client
) -> None:  # type: ignore[no-untyped-def]
    run = awaiting_run(fake_llm, task, owner)
    first_head = run.head_commit
    moved = move_base(repo_root, {"README": "calc\n"}, "Add a README")

    with pytest.raises(BaseMoved) as moved_on:
        run_approve(run=run, actor=owner)
    assert moved in moved_on.value.message or moved[:10] in moved_on.value.message
    run.refresh_from_db()
    assert run.status == RunStatus.VERIFYING and run.verify_result is None
    # The branch holds the base now, as a merge of both.
    assert git(repo_root, "rev-parse", f"{run.head_commit}^1", f"{run.head_commit}^2").split() == [first_head, moved]
    assert run.base_updates[-1]["conflicts"] == [] and run.base_commit == moved

    fake_llm.script(REVIEW_PASSES)
    run = drive_in_process(run)
    assert run.status == RunStatus.AWAITING_APPROVAL and run.verify_result["passed"]
    assert sum(1 for r in fake_llm.requests if r.forced_tool) >= 1  # reviewed again

    run = run_approve(run=run, actor=owner)
    assert run.status == RunStatus.APPROVED and run.merge_result["merged"]
    assert (repo_root / "README").read_text() == "calc\n"
    assert "return a + b" in (repo_root / "app" / "calc.py").read_text()
    git(repo_root, "merge-base", "--is-ancestor", moved, "main")
    client.force_login(owner)
    page = client.get(f"/tasks/{task.pk}").content.decode()
    assert f"<code>{moved[:10]}</code>" in page and "no conflict; tested again" in page


def resolve_conflict_reply(worktree: Path) -> ToolReply:
    """The Coder's edit: the conflicted block (as it is in the worktree) replaced by both
    intents — an int sum."""
    text = (worktree / "app" / "calc.py").read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    block = text[start : text.index("\n", end) + 1]
    return ToolReply(
        name=EDITOR,
        input={
            "command": "str_replace",
            "path": "app/calc.py",
            "old_str": block,
            "new_str": "    return int(a) + int(b)\n",
        },
    )


def test_a_conflicting_base_goes_to_the_coder_with_both_hunks_then_approval_merges(
    fake_llm, tested, repo_root, task, owner, client
) -> None:  # type: ignore[no-untyped-def]
    run = awaiting_run(fake_llm, task, owner)
    move_base(repo_root, {"app/calc.py": BASE_CALC}, "add converts its arguments to int")

    with pytest.raises(BaseMoved) as moved_on:
        run_approve(run=run, actor=owner)
    assert moved_on.value.extra["conflicts"] == ["app/calc.py"]
    run.refresh_from_db()
    assert (run.status, run.feedback_origin) == (RunStatus.CODING, FeedbackOrigin.BASE)
    assert run.base_updates[-1]["round"] == 1
    # The markers are committed on the branch, in the worktree the Coder edits.
    worktree = Path(run.worktree_path)
    assert "|||||||" in (worktree / "app" / "calc.py").read_text()

    fake_llm.script(resolve_conflict_reply(worktree), TextReply("Kept both: an int sum."), REVIEW_PASSES)
    run = drive_in_process(run)
    assert run.status == RunStatus.AWAITING_APPROVAL and run.verify_result["passed"], run.verify_result
    coder = [r for r in fake_llm.requests if EDITOR in r.tool_names][-1]
    prompt = coder.prompt_text
    assert "# Changes requested by the base branch, which moved" in prompt
    for words in ("return a + b", "return a - b", "return int(a) - int(b)", "add converts its arguments to int"):
        assert words in prompt, words
    assert "Make add add" in prompt  # the branch's own intent: its task

    client.force_login(owner)
    page = client.get(f"/tasks/{task.pk}").content.decode()
    assert "1 file conflicted, resolved in round 1" in page
    assert "+    return int(a) + int(b)" in page

    run = run_approve(run=run, actor=owner)
    assert run.status == RunStatus.APPROVED and run.merge_result["merged"]
    assert (repo_root / "app" / "calc.py").read_text() == "def add(a, b):\n    return int(a) + int(b)\n"


def test_markers_left_fail_the_verification_and_refuse_the_approval(fake_llm, linked, repo_root, task, owner) -> None:  # type: ignore[no-untyped-def]
    run = awaiting_run(fake_llm, task, owner)
    move_base(repo_root, {"app/calc.py": BASE_CALC}, "add converts its arguments to int")
    with pytest.raises(BaseMoved):
        run_approve(run=run, actor=owner)
    # The Coder leaves the file alone, round after round: without a test command the
    # markers are still checked, fail the verification, and no review passes.
    fake_llm.script(*[reply for _ in range(3) for reply in (TextReply("Nothing to do."), REVIEW_PASSES)])
    run = drive_in_process(run)
    assert run.status == RunStatus.FAILED
    assert MARKERS_LEFT_OUTPUT.format(paths="app/calc.py") == run.verify_result["output"]

    # A run awaiting approval with markers on its branch (a person's own commit, say):
    # approval refuses them clearly and merges nothing.
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.AWAITING_APPROVAL)
    run.refresh_from_db()
    main_before = git(repo_root, "rev-parse", "main")
    with pytest.raises(MergeRefused) as refused:
        run_approve(run=run, actor=owner)
    assert refused.value.message == MARKERS_LEFT.format(paths="app/calc.py")
    assert git(repo_root, "rev-parse", "main") == main_before


# --- the forge says the pull request conflicts


def push_to_remote_base(remote: Path, tmp_path: Path, files: dict[str, str], message: str) -> str:
    """Someone merges another change into the forge's main."""
    clone = tmp_path / "someone"
    git(tmp_path, "clone", "--quiet", str(remote), str(clone))
    moved = move_base(clone, files, message)
    git(clone, "push", "--quiet", "origin", "main")
    return moved


def post_control(forge, path: str, body: dict) -> dict:  # type: ignore[no-untyped-def]
    request = urllib.request.Request(
        f"http://127.0.0.1:{forge.port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def pull_answer(forge, kind: str, number: int = 1) -> dict:  # type: ignore[no-untyped-def]
    from llm.demo.forge.pulls import pull_answer as answer

    with forge.lock:
        return answer(forge, kind, "team/calc", forge.repositories["team/calc"].pulls[number])


def resolved_by_the_coder(fake_llm, run):  # type: ignore[no-untyped-def]
    fake_llm.script(resolve_conflict_reply(Path(run.worktree_path)), TextReply("Both kept."), REVIEW_PASSES)
    return drive_in_process(run)


def test_the_forge_reporting_a_conflict_brings_a_coder_round_pushed_as_a_fast_forward(
    fake_llm, forge, tested, remote, task, owner, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    set_forge(tested, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    first_head = git(remote, "rev-parse", run.branch)
    # Someone's change lands on the forge's main (the fake forge's control, over HTTP).
    control = {"repository": "team/calc", "path": "app/calc.py", "content": BASE_CALC}
    moved = post_control(forge, "/_control/base", {**control, "message": "add converts its arguments to int"})["commit"]
    assert git(remote, "rev-parse", "main") == moved
    assert (pull_answer(forge, "github")["mergeable"], pull_answer(forge, "github")["mergeable_state"]) == (
        False,
        "dirty",
    )

    assert pull_requests_poll(older_than_seconds=0) == 1
    run.refresh_from_db()
    assert (run.status, run.feedback_origin) == (RunStatus.CODING, FeedbackOrigin.BASE)
    assert run.base_updates[-1]["base_commit"] == moved and run.base_updates[-1]["via"] == "pull_request"

    run = resolved_by_the_coder(fake_llm, run)
    assert run.status == RunStatus.AWAITING_APPROVAL and run.verify_result["passed"]
    prompt = [r for r in fake_llm.requests if EDITOR in r.tool_names][-1].prompt_text
    assert "return a + b" in prompt and "return int(a) - int(b)" in prompt
    # Pushed to the same branch, never forced: the forge's old head and its base are
    # both ancestors of the new one, and the forge no longer reports a conflict.
    new_head = git(remote, "rev-parse", run.branch)
    assert new_head == run.head_commit == PullRequest.objects.get().pushed_head
    git(remote, "merge-base", "--is-ancestor", first_head, new_head)
    git(remote, "merge-base", "--is-ancestor", moved, new_head)
    assert pull_answer(forge, "github")["mergeable"] is True
    assert pull_requests_poll(older_than_seconds=0) == 1  # nothing more to do
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL


def test_a_gitlab_update_webhook_asks_the_forge_and_takes_the_base_in(
    fake_llm, forge, tested, remote, task, owner, tmp_path, client
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(tested, forge, remote, "gitlab", owner)
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    push_to_remote_base(remote, tmp_path, {"app/calc.py": BASE_CALC}, "add converts its arguments to int")
    assert pull_answer(forge, "gitlab")["detailed_merge_status"] == "conflict"
    _, payload = state_payload(forge, "gitlab", "team/calc", 1)
    payload["object_attributes"]["action"] = "update"
    body, headers = signed_delivery(
        "gitlab", "Merge Request Hook", payload, decrypt_secret(repository.forge_webhook_secret_encrypted)
    )
    answer = client.post(
        f"/api/forges/webhooks/{repository.pk}", body, content_type="application/json", **http_headers(headers)
    )
    assert answer.json() == {"outcome": "applied"}
    run.refresh_from_db()
    assert (run.status, run.feedback_origin) == (RunStatus.CODING, FeedbackOrigin.BASE)
    run = resolved_by_the_coder(fake_llm, run)
    assert git(remote, "rev-parse", run.branch) == run.head_commit
    assert pull_answer(forge, "gitlab")["has_conflicts"] is False


def test_a_rebase_is_refused_on_the_pushed_branch_and_said_on_the_pull_request(
    fake_llm, forge, tested, remote, task, owner, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    repository = set_forge(tested, forge, remote, "gitea", owner)
    repository.base_update = BaseUpdate.REBASE
    repository.save()
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    pushed = git(remote, "rev-parse", run.branch)
    push_to_remote_base(remote, tmp_path, {"app/calc.py": BASE_CALC}, "add converts its arguments to int")

    assert pull_requests_poll(older_than_seconds=0) == 1
    run.refresh_from_db()
    pull_request = PullRequest.objects.get()
    assert run.status == RunStatus.AWAITING_APPROVAL and run.base_updates == []
    assert pull_request.error == REBASE_REFUSED_PUSHED.format(branch=run.branch)
    assert git(remote, "rev-parse", run.branch) == pushed == run.head_commit  # nothing rewritten


def test_the_forges_git_unreachable_is_said_and_the_next_poll_takes_the_base_in(
    fake_llm, forge, tested, remote, task, owner, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    set_forge(tested, forge, remote, "github", owner)
    run = awaiting_run(fake_llm, task, owner)
    run_open_pull_request(run=run, actor=owner)
    push_to_remote_base(remote, tmp_path, {"app/calc.py": BASE_CALC}, "add converts its arguments to int")
    # The forge's API still answers (a conflict), its git is gone a while.
    set_conflicting(forge, "team/calc", 1, True)
    away = Path(str(remote) + ".away")
    shutil.move(remote, away)
    try:
        assert pull_requests_poll(older_than_seconds=0) == 1
    finally:
        shutil.move(away, remote)
    run.refresh_from_db()
    pull_request = PullRequest.objects.get()
    assert run.status == RunStatus.AWAITING_APPROVAL and run.base_updates == [] and pull_request.error
    assert pull_requests_poll(older_than_seconds=0) == 1
    run.refresh_from_db()
    assert run.status == RunStatus.CODING and run.base_updates[-1]["conflicts"] == ["app/calc.py"]
    set_conflicting(forge, "team/calc", 1, None)
    run = resolved_by_the_coder(fake_llm, run)
    assert git(remote, "rev-parse", run.branch) == run.head_commit
    assert pull_answer(forge, "github")["mergeable"] is True
