"""Reviewing: the Reviewer reads the change (and the tests' results) and passes it —
awaiting approval — or sends its findings back to the Coder, at most
MAX_REVIEW_ITERATIONS times; a passed review after fixes teaches lessons.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pipelines.agent_log import AgentLogStream
from pipelines.agents import prompts as agents
from pipelines.agents.conversation import call_agent
from pipelines.agents.distiller import learn
from pipelines.learning.lessons import REVIEWER_SOURCE, findings_moment
from pipelines.models import MAX_REVIEW_ITERATIONS, PipelineRun, RunStatus
from pipelines.phases.verifying import base_failures, verify_summary
from pipelines.runs import workspace
from pipelines.runs.leases import Lease
from pipelines.runs.services import run_transition

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

REVIEW_GAVE_UP = "The review still failed after {n} rounds of fixes. See the findings, then Retry or edit the task."


REVIEW_FAILS_REGARDLESS = "\n[The review fails all the same: {what} ({count} finding{s}) go back to the Coder.]\n"


def _what_failed(run: PipelineRun) -> str:
    if run.verify_result and not run.verify_result.get("passed"):
        return "the tests failed"
    if run.change_problems:
        return "changes could not be applied"
    return "the Coder's own note"


def execute(run: PipelineRun, lease: Lease) -> None:
    task = run.task
    from repos.verify import VerifyResult, verify_findings

    worktree = workspace.workspace_ensure(run)
    # Changes that could not be applied go straight back to the Coder: reviewing the
    # untouched branch would only pay for a review of nothing.
    known = [*run.change_problems, *run.coder_findings]
    if run.verify_result and not run.verify_result.get("passed"):
        known += verify_findings(VerifyResult(**run.verify_result), already_failing=base_failures(run))
    diff_text = workspace.workspace_diff_text(run)
    if run.change_problems:
        review: dict[str, Any] = {"pass": False, "findings": []}
    else:
        prompt = agents.reviewer_prompt(
            title=task.title,
            description=task.description,
            plan=run.plan,
            diff_text=diff_text,
            verify_summary=verify_summary(run.verify_result, base_failures(run)),
        )
        review = call_agent(run, lease, agents.REVIEWER, prompt, worktree=worktree)
    # Tagged so that learning can tell the Reviewer's own findings from failing tests and
    # the Coder's out-of-turns note (pipelines/learning/lessons.py).
    findings = [*known, *({**finding, "source": REVIEWER_SOURCE} for finding in review["findings"])]
    passed = bool(review["pass"]) and not known
    if review["pass"] and known:
        # The Reviewer's own "pass" is in its log: say why the review fails all the same.
        log = AgentLogStream(task=task, run=run, agent=agents.REVIEWER)
        log.write(
            REVIEW_FAILS_REGARDLESS.format(count=len(known), s="" if len(known) == 1 else "s", what=_what_failed(run))
        )
        log.flush()
    iteration = run.iteration + 1
    history = [*run.review_history, {"iteration": iteration, "pass": passed, "findings": findings}]
    if passed:
        # What the fix rounds had to fix is a lesson for the next tasks.
        half_life = task.project.lesson_half_life_hours
        learn(run, lease, findings_moment(run, history, half_life_hours=half_life))
    fields: dict[str, Any] = {
        "iteration": iteration,
        "review_findings": findings,
        "review_history": history,
        "coder_findings": [],  # now among this review's findings
    }
    if passed:
        to_status, reason = RunStatus.AWAITING_APPROVAL, "review passed"
    elif iteration < MAX_REVIEW_ITERATIONS:
        to_status, reason = RunStatus.FIXING, f"review {iteration} failed"
    else:
        to_status, reason = RunStatus.FAILED, "review failed"
        fields["error"] = REVIEW_GAVE_UP.format(n=iteration)
    run_transition(run=run, to_status=to_status, reason=reason, fields=fields, held_by=lease.token)
