"""A run's workspace: its own branch in its own git worktree of the project's repository.

Every run has one. A project that links no repository gets its own, an empty one made
the first time a run needs it (repos.services.repository_ensure). Git work is slow I/O:
callers run it outside database transactions, and each step is idempotent so that a
phase redone after a crash lands in the same place.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from core.exceptions import ApplicationError
from pipelines.models import FINAL_STATUSES, FeedbackOrigin, PipelineRun
from pipelines.runs.selectors import run_changes_requested

if TYPE_CHECKING:
    from core.masking import OutputMasker
    from core.sandbox import ProjectSandbox
    from repos.git import GitAccess
    from repos.models import Repository
    from repos.services.branches import FileLineChanges

logger = logging.getLogger(__name__)

REPOSITORY_NOT_READY = (
    "The project's repository is not ready ({status}). Wait for the clone to finish or fix the link "
    "on the project's Repository page, then Retry."
)
WORKTREE_GONE = (
    "This run's worktree was removed (runs keep theirs for WORKTREE_RETENTION_HOURS after they end). "
    "Its branch {branch} is still in the repository."
)


class WorkspaceUnavailable(ApplicationError):
    code = "workspace_unavailable"


def run_repository(run: PipelineRun) -> Repository | None:
    """The repository the run's project links, if any."""
    from repos.models import Repository

    return Repository.objects.filter(project_id=run.task.project_id).first()


def repository_test_command(run: PipelineRun) -> str:
    """The test command of the run's repository ('' when none is set or linked)."""
    repository = run_repository(run)
    return repository.test_command if repository is not None else ""


def run_test_environment(run: PipelineRun) -> tuple[ProjectSandbox, OutputMasker]:
    """How the run's project's test command runs (its variables in its environment)
    and the masker of its secrets for whatever that command prints: the verify step,
    the Coder's run_tests and the Claude CLI's test runner use the same two."""
    from core.sandbox import ProjectSandbox
    from repos.environments.services import commands_sandbox
    from repos.variables import project_sandbox_variables, secret_masker

    project = run.task.project
    repository = run_repository(run)
    if repository is None:
        return ProjectSandbox(variables=project_sandbox_variables(project)), secret_masker(project)
    # The repository's: the project's variables, the network where its tests opted in,
    # its base image; and what the run's environment restored into the worktree.
    kept = tuple((run.environment or {}).get("paths") or ())
    return commands_sandbox(repository=repository, kept=kept), secret_masker(project)


def branch_name(run: PipelineRun) -> str:
    return f"autocoder/task-{run.task_id}-run-{run.number}"


def worktree_path(run: PipelineRun) -> Path:
    return Path(settings.WORKTREES_ROOT) / f"task-{run.task_id}-run-{run.number}"


def workspace_ensure(run: PipelineRun) -> Path:
    """The run's worktree, made on first use: a branch from the base branch of the
    project's repository (its own one, made now, when it links none)."""
    if run.worktree_path:
        path = Path(run.worktree_path)
        if run.worktree_removed_at or not path.exists():
            raise WorkspaceUnavailable(WORKTREE_GONE.format(branch=run.branch))
        return path
    from repos.models import RepositoryStatus
    from repos.services import repository_ensure, worktree_create

    repository = repository_ensure(project=run.task.project)
    if repository.status != RepositoryStatus.READY:
        raise WorkspaceUnavailable(REPOSITORY_NOT_READY.format(status=repository.get_status_display().lower()))
    path = worktree_path(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    base_commit = worktree_create(repository=repository, branch=branch_name(run), path=path)
    fields: dict[str, Any] = {
        "branch": branch_name(run),
        "worktree_path": str(path),
        "base_commit": base_commit,
        "head_commit": base_commit,
    }
    PipelineRun.objects.filter(pk=run.pk).update(**fields)
    for name, value in fields.items():
        setattr(run, name, value)
    return path


def workspace_reset(run: PipelineRun, worktree: Path) -> None:
    """Put the worktree back at the run's last saved commit: a coding phase redone
    after a crash must not find the files of the attempt that was lost."""
    from repos.git import run_git

    access = _worktree_access(run, worktree)
    run_git(["reset", "--hard", "--quiet", run.head_commit or run.base_commit], cwd=worktree, access=access)
    # -ff: nested repositories too (a test command may have made one).
    run_git(["clean", "-ffdq"], cwd=worktree, access=access)


def workspace_restore_environment(run: PipelineRun, worktree: Path) -> None:
    """What the run's preparing phase restored and a reset removed (``git clean`` takes
    what the repository does not ignore, e.g. a ``.venv`` it has no ignore rule for),
    restored again."""
    from repos.environments.services import environment_restore_missing

    repository = run_repository(run)
    if repository is not None and run.environment:
        environment_restore_missing(repository=repository, worktree=worktree, ready=run.environment)


WRITTEN_PATHS_MAX = 5000


def workspace_record_written(run: PipelineRun, paths: Iterable[str]) -> None:
    """Keep the paths the Coder wrote (relative to the worktree) on the run, as it
    writes: a phase redone after a crash, and every later coding or fixing round, still
    know which new files are its own (the commit rule, :func:`workspace_commit`). They
    accumulate over the run; a path it deleted is a tracked deletion anyway."""
    new = [path for path in dict.fromkeys(paths) if path and path not in run.written_paths]
    if not new:
        return
    current = list(PipelineRun.objects.filter(pk=run.pk).values_list("written_paths", flat=True).first() or [])
    merged = [*current, *(path for path in new if path not in current)][:WRITTEN_PATHS_MAX]
    PipelineRun.objects.filter(pk=run.pk).update(written_paths=merged)
    run.written_paths = merged


def workspace_commit(run: PipelineRun, worktree: Path, summary: str) -> str:
    """Commit on the run's branch what the Coder changed (its summary in the message):
    changes to tracked files, and the new files it wrote with its tools. Any other new
    path (a test's report, build output, a nested repository) stays out of the commit
    and is listed in ``run.left_out``. The branch's head (unchanged when nothing
    changed)."""
    from repos.services import worktree_commit, worktree_pending

    repository = run_repository(run)
    if repository is None:
        raise WorkspaceUnavailable(WORKTREE_GONE.format(branch=run.branch))
    # From the row: every round's, whichever process recorded them.
    written = PipelineRun.objects.filter(pk=run.pk).values_list("written_paths", flat=True).first() or []
    restored = (run.environment or {}).get("paths") or []
    pending = worktree_pending(repository=repository, worktree=worktree, written=set(written), environment=restored)
    message = commit_message(run, pending.changes)
    if summary:
        message += f"\n{summary[:4000]}\n"
    head = worktree_commit(repository=repository, worktree=worktree, message=message, pending=pending)
    PipelineRun.objects.filter(pk=run.pk).update(left_out=pending.left_out)
    run.left_out = pending.left_out
    return head or run.head_commit


def _worktree_access(run: PipelineRun, worktree: Path) -> GitAccess:
    """What git may see for the run's worktree: it and its repository's ``.git``."""
    from repos.git import worktree_access

    repository = run_repository(run)
    if repository is None:
        raise WorkspaceUnavailable(WORKTREE_GONE.format(branch=run.branch))
    return worktree_access(Path(repository.path), worktree)


def commit_message(run: PipelineRun, changes: list[dict[str, Any]]) -> str:
    task = run.task
    if run.status == "fixing":
        why = f"fixes after review {run.iteration}"
    elif run.feedback or run_changes_requested(run=run):
        # A person's request here, or the pull request's: a review there, its checks, its base.
        whys: dict[str, str] = {
            FeedbackOrigin.CHECKS: "fixes for the pull request's failing checks",
            FeedbackOrigin.BASE: "the moved base's conflicts resolved",
            FeedbackOrigin.FORGE_REVIEW: "changes requested in review on the forge",
        }
        why = whys.get(run.feedback_origin, "changes requested in review")
    else:
        why = "implementation"
    files = "\n".join(f"- {change.get('action')} {change.get('file_path')}" for change in changes[:50])
    return f"{task.title[:60]} ({why})\n\nAutoCoder run {run.number} of task #{task.pk}.\n\n{files}\n"


def workspace_diff_text(run: PipelineRun) -> str:
    """The real ``git diff`` of the run's branch against where it started."""
    from repos.services import branch_diff

    repository = run_repository(run)
    if repository is None or not run.branch:
        return ""
    return branch_diff(repository=repository, base=run.base_commit, head=run.branch)


def workspace_changed_files(run: PipelineRun, *, at: str = "") -> list[dict[str, Any]] | None:
    """What the run's branch changed, file by file, at its commit ``at`` (default: the
    branch's tip); None without a branch."""
    from repos.services import branch_changed_files

    repository = run_repository(run)
    if repository is None or not run.branch or run.branch_discarded_at:
        return None
    return branch_changed_files(repository=repository, base=run.base_commit, head=at or run.branch)


def workspace_line_changes(run: PipelineRun, *, old: str, new: str, path: str) -> FileLineChanges:
    """Which lines of ``path`` at the run's commit ``old`` its commit ``new`` changed."""
    from repos.services import file_line_changes

    repository = run_repository(run)
    if repository is None:
        raise WorkspaceUnavailable(WORKTREE_GONE.format(branch=run.branch))
    return file_line_changes(repository=repository, old=old, new=new, path=path)


def workspace_remove(run: PipelineRun, *, discard_branch: bool = False) -> None:
    """Remove the run's worktree (and, when the user discards it, its branch)."""
    from repos.services import branch_delete, worktree_remove

    repository = run_repository(run)
    fields: dict[str, Any] = {}
    if repository is not None and run.worktree_path and not run.worktree_removed_at:
        worktree_remove(repository=repository, path=Path(run.worktree_path))
        fields["worktree_removed_at"] = timezone.now()
    if discard_branch and repository is not None and run.branch and not run.branch_discarded_at:
        branch_delete(repository=repository, branch=run.branch, force=True)
        fields["branch_discarded_at"] = timezone.now()
    if fields:
        PipelineRun.objects.filter(pk=run.pk).update(**fields)
        for name, value in fields.items():
            setattr(run, name, value)


def runs_cleanup_worktrees(*, older_than_hours: int | None = None) -> int:
    """Remove the worktrees of runs that ended more than the retention period ago.
    Branches stay (they hold the work until merged or discarded). Returns how many."""
    from datetime import timedelta

    hours = older_than_hours if older_than_hours is not None else settings.WORKTREE_RETENTION_HOURS
    cutoff = timezone.now() - timedelta(hours=hours)
    runs = (
        PipelineRun.objects.select_related("task")
        .filter(status__in=FINAL_STATUSES, finished_at__lt=cutoff, worktree_removed_at__isnull=True)
        .exclude(worktree_path="")
    )
    removed = 0
    for run in runs:
        try:
            workspace_remove(run)
        except ApplicationError as exc:
            logger.warning("Run %s: could not remove its worktree: %s", run.pk, exc.message)
            continue
        removed += 1
    return removed
