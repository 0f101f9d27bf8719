"""The "Memories" page: search semantic memories by meaning, add, reinforce, edit, pin,
delete; each shown with where it came from, which runs used it and when it fades.

Thin views over memory.services.semantic and memory.selectors.semantic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.models import User
from accounts.selectors import request_user
from core.exceptions import ApplicationError
from memory.citations import citations_from_json
from memory.forms.semantic import QUERY_MAX_LENGTH, MemoryEditForm, MemoryForm, RecallSearchForm
from memory.models.semantic import DecayPolicy, Memory
from memory.selectors.semantic import (
    MemorySearchResult,
    memory_confidence,
    memory_fades_at,
    memory_get_for_user,
    memory_list_recent,
    memory_run_names,
    memory_search,
    memory_source_label,
    memory_uses_for,
)
from memory.services.citations import memory_generalise
from memory.services.semantic import (
    InvalidOperation,
    memory_create,
    memory_delete,
    memory_pin,
    memory_reinforce,
    memory_share,
    memory_update_content,
)

RESULT_LIMIT = 20
CONSOLIDATED_MESSAGE = "A memory saying much the same was reinforced instead (the longer wording kept)."


# A run's page lives in pipelines, which memory may not import: reached by URL name
# (ARCHITECTURE.md, "three ways a lower app reaches a higher one").
RUN_PAGE_URL_NAME = "pipelines:run-lineage"


def run_page_url(run_id: int) -> str | None:
    """The run's lineage page, or None when no app serves one (runs shown as text)."""
    try:
        return reverse(RUN_PAGE_URL_NAME, kwargs={"run_id": run_id})
    except NoReverseMatch:
        return None


def _annotate(rows: list[dict[str, Any]]) -> None:
    uses = memory_uses_for(memory_ids=[row["memory"].pk for row in rows])
    run_ids = [row["memory"].source_run_id for row in rows if row["memory"].source_run_id]
    run_ids += [use.run_id for found in uses.values() for use in found.latest]
    run_names = memory_run_names(run_ids=run_ids)
    for row in rows:
        memory: Memory = row["memory"]
        row["confidence_pct"] = round(100 * row["confidence"])
        row["similarity_pct"] = None if row["similarity"] is None else round(100 * max(0.0, row["similarity"]))
        row["pinned"] = memory.decay_policy == DecayPolicy.PERMANENT
        row["fades_at"] = memory_fades_at(memory=memory)
        row["source_label"] = memory_source_label(memory=memory, run_names=run_names)
        row["source_url"] = run_page_url(memory.source_run_id) if memory.source_run_id else None
        row["about"] = [citation.label for citation in citations_from_json(memory.citations)]
        row["use_count"] = uses[memory.pk].count
        row["latest_uses"] = [
            {
                "run_id": use.run_id,
                "name": run_names[use.run_id],
                "agent": use.agent,
                "used_at": use.used_at,
                "url": run_page_url(use.run_id),
            }
            for use in uses[memory.pk].latest
        ]


def _results(request: HttpRequest, form: RecallSearchForm) -> tuple[str, list[dict[str, Any]]]:
    user = request_user(request)
    query = form.cleaned_data.get("q") or "" if form.is_valid() else ""
    min_confidence = (form.cleaned_data.get("min_confidence") or 0.0) if form.is_valid() else 0.0
    rows: list[dict[str, Any]]
    if query:
        found: list[MemorySearchResult] = memory_search(
            user=user, query=query, limit=RESULT_LIMIT, min_confidence=min_confidence
        )
        rows = [
            {"memory": r.memory, "similarity": r.similarity, "confidence": r.confidence, "score": r.score}
            for r in found
        ]
    else:
        rows = [
            {"memory": m, "similarity": None, "confidence": memory_confidence(memory=m), "score": None}
            for m in memory_list_recent(user=user, limit=RESULT_LIMIT)
        ]
    _annotate(rows)
    return query, rows


@login_required
@require_GET
def recall(request: HttpRequest) -> HttpResponse:
    search = RecallSearchForm(request.GET)
    query, rows = _results(request, search)
    context = {"search": search, "query": query, "rows": rows, "form": MemoryForm(user=request_user(request))}
    return render(request, "memory/recall.html", context)


@login_required
@require_GET
def recall_results(request: HttpRequest) -> HttpResponse:
    """The results list alone, for the htmx search box."""
    query, rows = _results(request, RecallSearchForm(request.GET))
    return render(request, "memory/recall_results.html", {"query": query, "rows": rows})


def _back(request: HttpRequest) -> HttpResponse:
    query = request.POST.get("q", "")[:QUERY_MAX_LENGTH]
    url = reverse("memory:recall")
    return redirect(f"{url}?{urlencode({'q': query})}" if query else url)


@login_required
@require_POST
def recall_add(request: HttpRequest) -> HttpResponse:
    user = request_user(request)
    form = MemoryForm(request.POST, user=user)
    if form.is_valid():
        data = form.cleaned_data
        try:
            _, created, consolidated = memory_create(
                owner=user,
                content=data["content"],
                applies_when=data["applies_when"],
                memory_type=data["memory_type"],
                decay_policy=data["decay_policy"],
                half_life_hours=data["half_life_hours"],
                project=data["project"],
                is_global=data["is_global"],
            )
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            if created:
                messages.success(request, "Remembered.")
            elif consolidated:
                messages.info(
                    request, "A memory saying much the same was reinforced instead (the longer wording kept)."
                )
            else:
                messages.info(request, "Already remembered: the existing memory was reinforced.")
            return redirect("memory:recall")
    search = RecallSearchForm({})
    query, rows = _results(request, search)
    context = {"search": search, "query": query, "rows": rows, "form": form}
    return render(request, "memory/recall.html", context, status=400)


def _memory_action(
    request: HttpRequest, memory_id: int, action: Callable[[User, int], object], done: str
) -> HttpResponse:
    """Run one service on the user's memory (404 for another user's), say ``done`` or why
    it was refused, and go back to the list."""
    user = request_user(request)
    pk = memory_get_for_user(user=user, memory_id=memory_id).pk
    try:
        action(user, pk)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done)
    return _back(request)


@login_required
@require_POST
def recall_reinforce(request: HttpRequest, memory_id: int) -> HttpResponse:
    return _memory_action(
        request,
        memory_id,
        lambda user, pk: memory_reinforce(owner=user, memory_id=pk),
        "Reinforced: its confidence is back to full.",
    )


@login_required
@require_POST
def recall_delete(request: HttpRequest, memory_id: int) -> HttpResponse:
    pk = memory_get_for_user(user=request_user(request), memory_id=memory_id).pk
    memory_delete(owner=request_user(request), memory_id=pk)
    messages.success(request, "Memory deleted.")
    return _back(request)


@login_required
@require_POST
def recall_pin(request: HttpRequest, memory_id: int) -> HttpResponse:
    """Pin (``pinned=1``: permanent) or unpin (``pinned=0``: back to its policy)."""
    pinned = request.POST.get("pinned") == "1"
    return _memory_action(
        request,
        memory_id,
        lambda user, pk: memory_pin(owner=user, memory_id=pk, pinned=pinned),
        "Pinned: it never fades." if pinned else "Unpinned: it fades by its policy again.",
    )


@login_required
@require_POST
def recall_share(request: HttpRequest, memory_id: int) -> HttpResponse:
    """Share with every project (``shared=1``) or keep to its own project (``shared=0``)."""
    shared = request.POST.get("shared") == "1"
    return _memory_action(
        request,
        memory_id,
        lambda user, pk: memory_share(owner=user, memory_id=pk, shared=shared),
        "Shared: every project's agents may be given it." if shared else "Kept to its own project again.",
    )


@login_required
@require_POST
def recall_generalise(request: HttpRequest, memory_id: int) -> HttpResponse:
    """The memory applies to the whole project (a stale one is given again)."""
    return _memory_action(
        request,
        memory_id,
        lambda user, pk: memory_generalise(owner=user, memory_id=pk),
        "It now applies to the whole project: any task of it may be given it.",
    )


@login_required
@require_http_methods(["GET", "POST"])
def recall_edit(request: HttpRequest, memory_id: int) -> HttpResponse:
    user = request_user(request)
    memory = memory_get_for_user(user=user, memory_id=memory_id)
    if request.method == "GET":
        form = MemoryEditForm(initial={"content": memory.content, "applies_when": memory.applies_when})
        return render(request, "memory/recall_edit.html", {"form": form, "memory": memory})
    form = MemoryEditForm(request.POST)
    if form.is_valid():
        try:
            memory_update_content(
                owner=user,
                memory_id=memory.pk,
                content=form.cleaned_data["content"],
                applies_when=form.cleaned_data["applies_when"],
            )
        except InvalidOperation as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, "Memory saved.")
            return redirect("memory:recall")
    return render(request, "memory/recall_edit.html", {"form": form, "memory": memory}, status=400)
