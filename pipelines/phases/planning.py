"""Planning: the Planner reads the task (and the worktree's files) and answers with the
plan's subtasks; the run goes on to prepare its environment or straight to coding.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pipelines.agents import prompts as agents
from pipelines.agents.conversation import call_agent
from pipelines.models import PipelineRun, RunStatus
from pipelines.runs import workspace
from pipelines.runs.ceiling import spend_ceiling_check
from pipelines.runs.leases import Lease
from pipelines.runs.services import run_transition

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


def execute(run: PipelineRun, lease: Lease) -> None:
    # A new run is a new round of the task's work: not once its spending ceiling is reached.
    spend_ceiling_check(run)
    task = run.task
    from repos.tools import file_tree

    worktree = workspace.workspace_ensure(run)
    prompt = agents.planner_prompt(
        title=task.title, description=task.description, file_tree=file_tree(worktree=worktree)
    )
    tool_input = call_agent(run, lease, agents.PLANNER, prompt, instructions_from=worktree)
    plan = sorted(tool_input["subtasks"], key=lambda subtask: subtask["order"])
    from tasks.models import Task

    Task.objects.filter(pk=task.pk).update(subtasks=plan)
    repository = workspace.run_repository(run)
    from repos.environments.services import environment_needed

    needed = repository is not None and environment_needed(repository=repository, commit=run.base_commit)
    run_transition(
        run=run,
        to_status=RunStatus.PREPARING if needed else RunStatus.CODING,
        reason="plan ready",
        fields={"plan": plan},
        held_by=lease.token,
    )
