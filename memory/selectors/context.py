"""Reads of the context store: a run's items and an item's lineage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from core.exceptions import NotFound
from core.selectors import one_or_not_found
from memory.models import ContextItem
from memory.services.context import CONTEXT_NOT_FOUND

if TYPE_CHECKING:
    from accounts.models import User
    from pipelines.models import PipelineRun

RUN_NOT_FOUND = "No such run."


def context_list_for_user(*, user: User) -> QuerySet[ContextItem]:
    return ContextItem.objects.filter(owner=user).select_related("run")


def context_get_for_user(*, user: User, context_id: str) -> ContextItem:
    """Read without counting an access (admin-like views, lineage)."""
    item = context_list_for_user(user=user).filter(pk=context_id).first()
    if item is None:
        raise NotFound(CONTEXT_NOT_FOUND)
    return item


def context_run_get_for_user(*, user: User, run_id: object) -> PipelineRun:
    from pipelines.models import PipelineRun

    runs = PipelineRun.objects.select_related("task__project").filter(task__project__owner=user)
    return one_or_not_found(runs, run_id, RUN_NOT_FOUND)


def context_list_for_run(*, user: User, run: PipelineRun) -> list[ContextItem]:
    """The run's items, oldest first (the order the pipeline made them)."""
    return list(context_list_for_user(user=user).filter(run=run).order_by("created_at"))


def context_lineage(*, user: User, context_id: str) -> dict[str, Any]:
    """The item with all its ancestors and descendants: ``{"nodes": [...], "edges": [...]}``
    with an edge ``{"from": parent, "to": child}`` per parent link."""
    root = context_get_for_user(user=user, context_id=context_id)
    links = dict(ContextItem.objects.filter(owner=user).values_list("id", "parent_ids"))
    children: dict[str, list[str]] = {}
    for child, parents in links.items():
        for parent in parents or []:
            children.setdefault(parent, []).append(child)

    def walk(start: str, step: Any) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            for nxt in step(stack.pop()):
                if nxt in links and nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    ancestors = walk(root.pk, lambda pk: links.get(pk) or [])
    descendants = walk(root.pk, lambda pk: children.get(pk, []))
    ids = {root.pk} | ancestors | descendants
    nodes = list(ContextItem.objects.filter(owner=user, pk__in=ids).order_by("created_at"))
    edges = [{"from": parent, "to": node.pk} for node in nodes for parent in node.parent_ids or [] if parent in ids]
    return {"root": root.pk, "nodes": nodes, "edges": edges, "ancestors": ancestors, "descendants": descendants}
