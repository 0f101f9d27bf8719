"""Coding and fixing: the Coder edits the run's worktree (its tools over the API, the
Claude CLI, or a coding agent over ACP the task or project picked), learning first from
a request for changes; then the commit and the branch's diff, what the round did about
the person's line comments (changed their lines, or said why not:
pipelines/review/selectors.py ``line_comments_verdicts``), and the run goes on to verify
or review.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from core.coder_agents import run_coder_agent
from pipelines.agents import prompts as agents
from pipelines.agents.distiller import learn
from pipelines.agents.lineage import context_record_agent_call
from pipelines.agents.recall import recall_for_phase
from pipelines.agents.replies import REPLY_MARKER_HINT, REPLY_TOOL_HINT
from pipelines.agents.turns import PhaseInterrupted, run_provider
from pipelines.learning.lessons import feedback_moment
from pipelines.models import FeedbackOrigin, PipelineRun, RunStatus
from pipelines.review.selectors import line_comment_lesson_texts, line_comments_for_coder, line_comments_verdicts
from pipelines.review.services import line_comments_record_verdicts
from pipelines.runs import workspace
from pipelines.runs.ceiling import spend_ceiling_check
from pipelines.runs.leases import Lease
from pipelines.runs.services import run_transition

logger = logging.getLogger(__name__)


def execute(run: PipelineRun, lease: Lease) -> None:
    """The Coder edits the run's worktree itself: a tool conversation over the API
    (pipelines/agents/coder.py) or the provider's own agent (the Claude CLI,
    pipelines/agents/coder_cli.py). What it leaves there is committed on the run's branch and
    is the change."""
    from pipelines.agents.coder import code_in_worktree
    from pipelines.agents.coder_cli import code_with_cli

    # Every coding phase is a round — the first, one for a request for changes, a fix
    # after a failed review: none starts once the task's spending ceiling is reached.
    spend_ceiling_check(run)
    worktree = workspace.workspace_ensure(run)
    # A phase redone after a crash must not find the files of the attempt that was lost.
    workspace.workspace_reset(run, worktree)
    workspace.workspace_restore_environment(run, worktree)
    # A person asked for changes: the next tasks of the project learn it now, not only
    # once this run ends (it may never pass).
    # The comments the latest request sent (none before the first): with the feedback,
    # or alone — a request may be line comments only.
    line_comments = line_comments_for_coder(run=run)
    learn(run, lease, feedback_moment(run, line_comment_lesson_texts(line_comments), line_comments))
    findings = run.review_findings if run.status == RunStatus.FIXING else []
    task = run.task
    # The Claude CLI and an ACP agent have only their own tools: they reply to a comment
    # with a marker.
    acp_agent_name = run_coder_agent(
        recorded=run.coder_agent, task_choice=task.coder_agent, project_choice=task.project.coder_agent
    )
    edits_itself = bool(acp_agent_name) or run_provider(run).edits_worktree
    prompt = agents.coder_editing_prompt(
        title=task.title,
        description=task.description,
        plan=run.plan,
        findings=findings,
        feedback=run.feedback,
        feedback_from=FeedbackOrigin(run.feedback_origin).label,
        branch_diff=workspace.workspace_diff_text(run),
        line_comments=line_comments,
        reply_hint=REPLY_MARKER_HINT if edits_itself else REPLY_TOOL_HINT,
        has_start_subtask=not edits_itself,
    )
    # Recalled once for the phase: the system prompt of every turn is the same cached prefix.
    recall = recall_for_phase(run, agents.CODER)
    comment_ids = [comment["id"] for comment in line_comments]
    if acp_agent_name:
        # Only here: the ACP library's protocol models take over a second to load.
        from pipelines.agents.coder_acp import code_with_acp

        outcome = code_with_acp(
            run, lease, prompt, worktree, recall=recall, comment_ids=comment_ids, agent_name=acp_agent_name
        )
    else:
        edit = code_with_cli if edits_itself else code_in_worktree
        outcome = edit(run, lease, prompt, worktree, recall=recall, comment_ids=comment_ids)
    # The worktree is outside the transaction: a worker that lost its lease while the
    # Coder worked must not commit into the one its successor now uses.
    if not lease.confirm():
        raise PhaseInterrupted
    head = workspace.workspace_commit(run, worktree, outcome.summary)
    changes = workspace.workspace_changed_files(run) or []
    # The conversation's turns are in the daily log one by one; the lineage keeps it
    # whole: the prompt, then every edit and test run and what came of it.
    context_record_agent_call(
        run=run,
        agent=agents.CODER,
        outcome="ok",
        prompt=prompt,
        output={
            "summary": outcome.summary,
            "steps": outcome.steps,
            "files": [{"file_path": change["file_path"], "action": change["action"]} for change in changes],
            "head_commit": head,
        },
        daily_log=False,
        recalled=recall.record(),
    )
    # Out of turns or tokens: what was done is committed and reviewed like any change
    # (tests, the Reviewer), and the review adds the Coder's finding.
    coder_findings = [outcome.finding] if outcome.finding else []
    fields: dict[str, Any] = {
        "file_changes": changes,
        "change_problems": [],
        "coder_findings": coder_findings,
        "verify_result": None,
        "head_commit": head,
    }
    next_status = RunStatus.REVIEWING
    repository = workspace.run_repository(run)
    # A base merged in with conflicts is verified even without a test command: no marker left.
    if repository is not None and (repository.test_command.strip() or run.base_updates):
        next_status = RunStatus.VERIFYING
    reason = f"{len(changes)} file change(s) on the branch" + (" (out of turns)" if coder_findings else "")
    # Whether the round changed each commented line is read from git, not assumed: the
    # comment's commit against the round's head (git, so before the transaction).
    verdicts = line_comments_verdicts(run=run, head=head, replies=outcome.replies) if line_comments else []
    with transaction.atomic():
        # With the transition: a worker that lost its lease records no verdict.
        line_comments_record_verdicts(verdicts=verdicts)
        run_transition(run=run, to_status=next_status, reason=reason, fields=fields, held_by=lease.token)
