"""Celery tasks of the pipeline: thin, ids only, idempotent (safe under acks_late
redelivery and sweeper duplicates: a run not in a working phase, or leased by another
worker, is left alone). A worker shutting down (core.workers.shutdown_requested) makes
calls in flight give their phase back at once; the sweeper resumes them.

Each task imports what it runs inside its function; the pipeline queues these tasks by
name (core/jobs.py), so nothing in the app imports this module back."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def pipeline_advance(run_id: int) -> None:
    from pipelines.phases.driver import run_advance
    from pipelines.pull_requests.reviews import pull_request_reviews_resume
    from pipelines.pull_requests.rounds import pull_request_follow_run

    run_advance(run_id=run_id)
    # A round the forge asked for is over: its new commits go to the pull request.
    pull_request_follow_run(run_id=run_id)
    # Then the review comments it judged are answered there, and the next review starts.
    pull_request_reviews_resume(run_id=run_id)


@shared_task(ignore_result=True)
def pipeline_cleanup_worktrees() -> int:
    from pipelines.runs.workspace import runs_cleanup_worktrees

    return runs_cleanup_worktrees()


@shared_task(ignore_result=True)
def pipeline_poll_pull_requests() -> int:
    from pipelines.pull_requests.poll import pull_requests_poll

    return pull_requests_poll()


@shared_task(ignore_result=True)
def pipeline_forget_forge_deliveries() -> int:
    from pipelines.pull_requests.webhooks import forge_deliveries_forget

    return forge_deliveries_forget()


@shared_task(ignore_result=True)
def pipeline_poll_forge_issues() -> int:
    from pipelines.forge_issues.services import forge_issues_poll

    return forge_issues_poll()


@shared_task(ignore_result=True)
def pipeline_close_forge_issue(task_id: int) -> None:
    from pipelines.forge_issues.services import forge_issue_close_pending

    forge_issue_close_pending(task_id=task_id)
