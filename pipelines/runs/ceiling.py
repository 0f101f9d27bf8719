"""A task's spending ceiling: what all its runs may spend together, every round of every
run (the project's setting, ``projects.selectors.project_task_spend_ceiling``).

One check, ``spend_ceiling_check``, called before anything that would spend more: at
the start of every phase that opens a round (a new run's planning, coding after a request
for changes, each fix round after a failed review — and any loop added later) and
before every agent turn is bought (pipelines/agents/turns.py). Reaching the ceiling
pauses the run (``pause_kind`` "spend_ceiling", pipelines/phases/driver.py): nothing is
lost, and Retry after the ceiling was raised resumes the phase.

The ceiling is reached when the task's spend is at or over it: a call's cost is known
only once it is made, so the last call before the pause may take the task past it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from core.exceptions import Conflict
from pipelines.models import PipelineRun
from pipelines.runs.selectors import task_spend
from projects.models import Project
from projects.selectors import project_task_spend_ceiling

SPEND_CEILING = "spend_ceiling"
SPEND_CEILING_REACHED = (
    "This task has spent {spent} of its {ceiling} ceiling. Raise the ceiling in the project's settings, then Retry."
)


def money(amount: Decimal) -> str:
    """An amount as the pages and messages show it: ``$1.20``."""
    return f"${amount.quantize(Decimal('0.01')):,}"


class SpendCeilingReached(Conflict):
    """The task's runs have spent its ceiling: no further round or call."""

    code = "spend_ceiling_reached"


@dataclass(frozen=True)
class TaskSpend:
    """What a task's runs have spent, and its ceiling (None: no ceiling)."""

    spent: Decimal
    ceiling: Decimal | None

    @property
    def reached(self) -> bool:
        return self.ceiling is not None and self.spent >= self.ceiling

    @property
    def label(self) -> str:
        """``$1.20 / $5.00``, or ``$1.20`` without a ceiling."""
        return money(self.spent) + (f" / {money(self.ceiling)}" if self.ceiling is not None else "")

    def as_dict(self) -> dict[str, str | bool | None]:
        return {
            "spent_usd": str(self.spent.quantize(Decimal("0.000001"))),
            "ceiling_usd": None if self.ceiling is None else str(self.ceiling),
            "reached": self.reached,
        }


def task_spend_against_ceiling(*, task_id: int) -> TaskSpend:
    """The task's spend (its runs' costs) and its project's ceiling as they are now: read
    afresh, so a ceiling raised while the run was paused lets it go on."""
    project = Project.objects.filter(tasks=task_id).get()
    return TaskSpend(spent=task_spend(task_id=task_id), ceiling=project_task_spend_ceiling(project=project))


def spend_ceiling_message(spend: TaskSpend) -> str:
    assert spend.ceiling is not None
    return SPEND_CEILING_REACHED.format(spent=money(spend.spent), ceiling=money(spend.ceiling))


def spend_ceiling_check(run: PipelineRun) -> None:
    """SpendCeilingReached when ``run``'s task has spent its ceiling: call it before a
    round starts or a call is bought."""
    spend = task_spend_against_ceiling(task_id=run.task_id)
    if spend.reached:
        raise SpendCeilingReached(spend_ceiling_message(spend), extra=spend.as_dict())
