"""The "Memories" page: search semantic memories by meaning, add, reinforce, delete.

Thin views over memory.services.semantic and memory.selectors.semantic.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from accounts.selectors import request_user
from core.exceptions import ApplicationError
from memory.forms.semantic import QUERY_MAX_LENGTH, MemoryForm, RecallSearchForm
from memory.selectors.semantic import (
    MemorySearchResult,
    memory_confidence,
    memory_get_for_user,
    memory_list_recent,
    memory_search,
)
from memory.services.semantic import memory_create, memory_delete, memory_reinforce

RESULT_LIMIT = 20


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
    for row in rows:
        row["confidence_pct"] = round(100 * row["confidence"])
        row["similarity_pct"] = None if row["similarity"] is None else round(100 * max(0.0, row["similarity"]))
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
            _, created = memory_create(
                owner=user,
                content=data["content"],
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
            else:
                messages.info(request, "Already remembered: the existing memory was reinforced.")
            return redirect("memory:recall")
    search = RecallSearchForm({})
    query, rows = _results(request, search)
    context = {"search": search, "query": query, "rows": rows, "form": form}
    return render(request, "memory/recall.html", context, status=400)


@login_required
@require_POST
def recall_reinforce(request: HttpRequest, memory_id: int) -> HttpResponse:
    pk = memory_get_for_user(user=request_user(request), memory_id=memory_id).pk
    try:
        memory_reinforce(owner=request_user(request), memory_id=pk)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Reinforced: its confidence is back to full.")
    return _back(request)


@login_required
@require_POST
def recall_delete(request: HttpRequest, memory_id: int) -> HttpResponse:
    pk = memory_get_for_user(user=request_user(request), memory_id=memory_id).pk
    memory_delete(owner=request_user(request), memory_id=pk)
    messages.success(request, "Memory deleted.")
    return _back(request)
