"""The base moved on while a run awaited approval. Approving it here merges the new base
into its branch first: cleanly → the tests and the review run again, then approval
merges; with a conflict → the Coder gets a round with both sides' hunks and what each
meant, resolves the markers committed on the branch, the tests pass, approval merges.
Markers left refuse the approval. The run's page says what was resolved and how."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.models import FeedbackOrigin, PipelineRun, RunStatus
from pipelines.phases.verifying import MARKERS_LEFT_OUTPUT
from pipelines.review.services import BaseMoved, MergeRefused, run_approve
from pipelines.runs.base_update import MARKERS_LEFT
from pipelines.tests.pull_requests.test_pull_requests import awaiting_run, git
from pipelines.tests.repositories import git_commit
from repos.models import Repository
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
        input={"command": "str_replace", "path": "app/calc.py", "old_str": block, "new_str": "    return int(a) + int(b)\n"},
    )


def test_a_conflicting_base_goes_to_the_coder_with_both_hunks_then_approval_merges(
    fake_llm, tested, repo_root, task, owner, client
) -> None:  # type: ignore[no-untyped-def]
    run = awaiting_run(fake_llm, task, owner)
    moved = move_base(repo_root, {"app/calc.py": BASE_CALC}, "add converts its arguments to int")

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
