"""What runs cost: each agent call's tokens and cost counted on its run, the run's cost
on its task (``Task.total_cost``, the board card's) and in the task's summary of its
latest run; recounted when runs are deleted."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from pipelines.models import (
    PipelineRun,
)
from tasks.models import Task

if TYPE_CHECKING:
    pass


def cost_text(cost: Decimal | int | str) -> str:
    """A cost as the task's summary keeps it (six decimals, a string: JSON has no decimals)."""
    return str(Decimal(cost).quantize(Decimal("0.000001")))


def task_cost_add(*, task_id: int, amount: Decimal) -> None:
    """Add what a call cost to its task's total (Task.total_cost, the board card's)."""
    Task.objects.filter(pk=task_id).update(total_cost=Coalesce(F("total_cost"), Value(Decimal(0))) + amount)


USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "cost_usd")


def run_usage_add(
    *,
    run: PipelineRun,
    input_tokens: int,
    output_tokens: int,
    cost: Decimal,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
) -> dict[str, Any]:
    """Count one agent call's tokens and cost on its run, and the cost on the run's task,
    in one transaction; the run's totals after it. ``input_tokens`` is the call's
    uncached input: the run's ``input_tokens`` counts the cache writes and reads too (its
    token budget does), and its two cache counts say how much of it was cached."""
    with transaction.atomic():
        PipelineRun.objects.filter(pk=run.pk).update(
            input_tokens=F("input_tokens") + input_tokens + cache_creation_input_tokens + cache_read_input_tokens,
            output_tokens=F("output_tokens") + output_tokens,
            cache_creation_input_tokens=F("cache_creation_input_tokens") + cache_creation_input_tokens,
            cache_read_input_tokens=F("cache_read_input_tokens") + cache_read_input_tokens,
            cost_usd=F("cost_usd") + cost,
        )
        task_cost_add(task_id=run.task_id, amount=cost)
        _latest_run_cost_refresh(run=run)
        totals: dict[str, Any] = PipelineRun.objects.filter(pk=run.pk).values(*USAGE_FIELDS).get()
        return totals


def _latest_run_cost_refresh(*, run: PipelineRun) -> None:
    """Copy the run's cost into its task's ``pipeline_state`` while it is the task's
    latest run. Called holding the run's row (just updated), so no transition of this
    run writes the state meanwhile; the update is conditioned on the state still naming
    this run, so a new run started meanwhile keeps its own."""
    state = Task.objects.filter(pk=run.task_id).values_list("pipeline_state", flat=True).get()
    if not isinstance(state, dict) or state.get("run_id") != run.pk:
        return
    cost = PipelineRun.objects.filter(pk=run.pk).values_list("cost_usd", flat=True).get()
    Task.objects.filter(pk=run.task_id, pipeline_state__run_id=run.pk).update(
        pipeline_state={**state, "cost_usd": cost_text(cost)}
    )


def task_cost_refresh(*, task_id: int) -> None:
    """Recount the task's total from its runs (None when it has none left)."""
    total = (
        PipelineRun.objects.filter(task=OuterRef("pk"))
        .order_by()
        .values("task")
        .annotate(total=Sum("cost_usd"))
        .values("total")
    )
    Task.objects.filter(pk=task_id).update(total_cost=Subquery(total))


def run_deleted(sender: type[PipelineRun], instance: PipelineRun, origin: Any = None, **kwargs: Any) -> None:
    """post_delete of a run: runs deleted themselves (in the admin, or a start the queue
    refused) no longer count in their task's total. A task deleted with its runs needs nothing."""
    if isinstance(origin, PipelineRun) or getattr(origin, "model", None) is PipelineRun:
        task_cost_refresh(task_id=instance.task_id)
