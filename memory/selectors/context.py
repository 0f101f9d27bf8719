"""Reads of the context store: a user's items, a run's items and an item's lineage."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from core.exceptions import NotFound
from memory.models import ContextItem

if TYPE_CHECKING:
    from accounts.models import User

CONTEXT_NOT_FOUND = "No such context item."
RUN_NOT_FOUND = "No such run."

# A run's items (the list API's ``?run=``): memory keeps items per pipeline run but knows
# nothing of runs, which belong to a higher layer. That layer registers at start-up how to
# list the items of one of a user's runs, raising NotFound for a run that is not theirs.
RunItemsLister = Callable[..., list[ContextItem]]
_run_items_lister: list[RunItemsLister] = []


def context_list_for_user(*, user: User) -> QuerySet[ContextItem]:
    return ContextItem.objects.filter(owner=user).select_related("run")


def context_get_for_user(*, user: User, context_id: str) -> ContextItem:
    """Read without counting an access (admin-like views, lineage)."""
    item = context_list_for_user(user=user).filter(pk=context_id).first()
    if item is None:
        raise NotFound(CONTEXT_NOT_FOUND)
    return item


def context_run_items_lister_register(lister: RunItemsLister) -> None:
    """Set the lister of a run's items: ``lister(user=..., run_id=...)``."""
    _run_items_lister[:] = [lister]


def context_list_for_run_id(*, user: User, run_id: object) -> list[ContextItem]:
    """The items of one of the user's runs, oldest first; NotFound when there is no such
    run of theirs (or no lister is registered)."""
    if not _run_items_lister:
        raise NotFound(RUN_NOT_FOUND)
    return _run_items_lister[0](user=user, run_id=run_id)


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
