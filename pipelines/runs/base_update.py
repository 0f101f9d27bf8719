"""The base branch moved on while a run awaited approval: its branch takes the new base in
(repos/services/base_update.py: merged, or rebased when never pushed), recorded on the run
(``PipelineRun.base_updates``). A clean merge sends the run through its tests and review
again (``run_retest_after_base``); conflicts are committed with their markers and become a
Coder round — a request for changes whose feedback (``base_conflict_feedback``) holds both
sides' hunks and what each side meant — opened by the door of whoever noticed: the
approval here (pipelines/review/services.py) or the forge (pipelines/pull_requests/conflicts.py).

Git is slow I/O: nothing here holds a transaction over it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils import timezone

from pipelines.models import PipelineRun, PullRequest, RunStatus
from pipelines.runs import workspace
from pipelines.runs.services import run_transition

if TYPE_CHECKING:
    from repos.services.base_update import BaseUpdateResult

MARKERS_LEFT = (
    "Conflict markers are still in {paths}: the conflicts of the base merged in are not resolved. "
    "Request changes (the Coder resolves them) before approving."
)
RETESTING = (
    "The base branch moved on: {base} ({commit}) was merged into the branch cleanly. The tests and the review run "
    "again before the run can be approved."
)
CONFLICT_ROUND = (
    "The base branch moved on: {base} ({commit}) was merged into the branch and {count} file(s) conflicted. The "
    "Coder resolves them now; the tests and the review run again before the run can be approved."
)
# The feedback goes into the Coder's prompt whole.
FEEDBACK_MAX_CHARS = 16_000


def run_branch_pushed(run: PipelineRun) -> bool:
    """Whether the run's branch was ever pushed (to its pull request): a rebase would
    need a forced push then."""
    return PullRequest.objects.filter(run=run).exclude(pushed_to="").exists()


def run_take_base(*, run: PipelineRun, via: str, from_remote: bool = False) -> BaseUpdateResult | None:
    """Bring the base's head into the run's branch (``from_remote``: the push target's
    base, fetched first — the forge's base moved). None when the branch already has it.
    The branch's new head, and the new base it now starts from, are kept on the run with
    the update (``via``: "approval" or "pull_request"). Raises the repository's errors:
    BaseUpdateRefused (a rebase of a pushed branch), GitError (``extra.retryable``)."""
    from repos.services.base_update import base_head, branch_has_base, branch_take_base

    repository = workspace.run_repository(run)
    if repository is None or not run.branch:
        return None
    base = base_head(repository=repository, fetch_for=run.task.project.owner if from_remote else None)
    if branch_has_base(repository=repository, branch=run.branch, base_commit=base):
        return None
    worktree = workspace.workspace_ensure(run)
    message = (
        f"Merge {repository.base_branch} ({base[:10]}) into {run.branch}\n\n"
        f"AutoCoder run {run.number} of task #{run.task_id}: the base branch moved on.\n"
    )
    result = branch_take_base(
        repository=repository,
        branch=run.branch,
        worktree=worktree,
        base_commit=base,
        pushed=run_branch_pushed(run),
        message=message,
    )
    entry: dict[str, Any] = {
        "how": result.how,
        "base_branch": repository.base_branch,
        "base_commit": result.base_commit,
        "old_head": result.old_head,
        "merged_head": result.head,
        "conflicts": result.conflicted_paths,
        "round": None,
        "via": via,
        "at": timezone.now().isoformat(),
    }
    fields = {"head_commit": result.head, "base_commit": result.base_commit, "base_updates": [*run.base_updates, entry]}
    PipelineRun.objects.filter(pk=run.pk).update(**fields)
    for name, value in fields.items():
        setattr(run, name, value)
    return result


def run_retest_after_base(*, run: PipelineRun, result: BaseUpdateResult) -> PipelineRun:
    """The base merged in cleanly: the run's tests (or, without a test command, its
    review) run again on the merge before it can be approved."""
    repository = workspace.run_repository(run)
    has_tests = repository is not None and bool(repository.test_command.strip())
    return run_transition(
        run=run,
        to_status=RunStatus.VERIFYING if has_tests else RunStatus.REVIEWING,
        reason=f"the base moved on: {result.base_commit[:10]} merged in cleanly",
        fields={"verify_result": None, "iteration": 0, "review_findings": []},
    )


def run_mark_base_round(*, run: PipelineRun, round_number: int) -> None:
    """The Coder round that resolves the latest base update's conflicts."""
    updates = list(run.base_updates)
    if updates:
        updates[-1] = {**updates[-1], "round": round_number}
        PipelineRun.objects.filter(pk=run.pk).update(base_updates=updates)
        run.base_updates = updates


def base_conflict_feedback(*, run: PipelineRun, result: BaseUpdateResult, base_branch: str) -> str:
    """What the Coder is told: the base that moved, what each side meant (the run's task
    and plan; the base's commit subjects), and each conflicted file's hunks — ours, the
    base both started from, theirs — bounded."""
    task = run.task
    lines = [
        f"The base branch `{base_branch}` moved on (now at {result.base_commit[:10]}) and was merged into this "
        f"branch; {len(result.conflicts)} file(s) conflicted. The merge is committed with git's conflict markers "
        "(<<<<<<< this branch, ||||||| where both started, ======= the base now, >>>>>>> end). Resolve every "
        "conflict so that what both sides meant holds, and remove every marker: a marker left fails the run.",
        "",
        "## What this branch meant (ours)",
        f"Task: {task.title}",
    ]
    plan = sorted(run.plan or [], key=lambda step: step.get("order", 0)) if isinstance(run.plan, list) else []
    lines += [f"- {step.get('title', '')}: {step.get('description', '')}" for step in plan[:10]]
    lines += ["", "## What the base's new commits meant (theirs)"]
    lines += [f"- {subject}" for subject in result.base_subjects] or ["- (no commit subjects)"]
    for conflict in result.conflicts:
        lines += ["", f"## {conflict.path}"]
        if not conflict.hunks:
            lines.append("(changed on one side, deleted or binary on the other: decide which stays)")
        for number, hunk in enumerate(conflict.hunks, 1):
            lines += [
                f"### Conflict {number}",
                "Ours (this branch):",
                "```",
                hunk.ours,
                "```",
                "Where both started:",
                "```",
                hunk.base,
                "```",
                "Theirs (the base now):",
                "```",
                hunk.theirs,
                "```",
            ]
        if conflict.truncated:
            lines.append("(more conflict lines in the file than shown here)")
    text = "\n".join(lines)
    if len(text) > FEEDBACK_MAX_CHARS:
        text = text[:FEEDBACK_MAX_CHARS] + "\n… (cut: open the files for the rest of the conflicts)"
    return text


def run_markers_left(run: PipelineRun) -> list[str]:
    """The files of the run's base updates that still hold conflict markers at its head."""
    from repos.services.base_update import conflict_markers_left

    paths = sorted({path for update in run.base_updates for path in update.get("conflicts") or []})
    repository = workspace.run_repository(run)
    if not paths or repository is None or not run.head_commit:
        return []
    return conflict_markers_left(repository=repository, commit=run.head_commit, paths=paths)


RESOLUTION_DIFF_MAX_CHARS = 20_000


def run_base_updates_shown(run: PipelineRun) -> list[dict[str, Any]]:
    """The run's base updates as its page shows them: what was merged, how many files
    conflicted, the round that resolved them and what it changed in them (the newest
    update's diff, from the commit with the markers to the run's head)."""
    from repos.services.base_update import resolution_diff

    shown: list[dict[str, Any]] = []
    repository = workspace.run_repository(run)
    updates = [update for update in run.base_updates if isinstance(update, dict)]
    for index, update in enumerate(updates):
        conflicts = list(update.get("conflicts") or [])
        merged, diff = str(update.get("merged_head") or ""), ""
        resolved = bool(update.get("round")) and run.head_commit != merged and run.status != RunStatus.CODING
        if resolved and repository is not None and index == len(updates) - 1:
            diff = resolution_diff(repository=repository, merged=merged, resolved=run.head_commit, paths=conflicts)
        shown.append(
            {
                **update,
                "conflict_count": len(conflicts),
                "resolved": resolved,
                "resolution_diff": diff[:RESOLUTION_DIFF_MAX_CHARS],
            }
        )
    return shown
