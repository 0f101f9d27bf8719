"""The memory page: facts and goals by hand, and the prompt context the agents get.

Thin views over memory.services.facts and memory.selectors.facts.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.selectors import request_user
from core.exceptions import Conflict
from core.forms import add_service_errors
from memory.forms.facts import FactForm, GoalForm
from memory.models import Goal
from memory.selectors.facts import (
    fact_get_for_user,
    fact_list,
    goal_get_for_user,
    goal_list,
    memory_prompt_context,
)
from memory.services import facts as services
from projects.context_processors import get_current_project

LIST_LIMIT = 200


def _index(
    request: HttpRequest, *, fact_form: FactForm | None = None, goal_form: GoalForm | None = None, status: int = 200
) -> HttpResponse:
    user = request_user(request)
    project = get_current_project(request)
    context = {
        "facts": fact_list(user=user).select_related("project")[:LIST_LIMIT],
        "active_goals": goal_list(user=user, status=Goal.Status.ACTIVE).select_related("project")[:LIST_LIMIT],
        "completed_goals": goal_list(user=user, status=Goal.Status.COMPLETED).select_related("project")[:LIST_LIMIT],
        "fact_form": fact_form or FactForm(user=user, auto_id="fact_%s"),
        "goal_form": goal_form or GoalForm(user=user, auto_id="goal_%s"),
        "preview_project": project,
        "preview": memory_prompt_context(user=user, project=project),
    }
    return render(request, "memory/index.html", context, status=status)


@login_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    return _index(request)


@login_required
@require_POST
def fact_create(request: HttpRequest) -> HttpResponse:
    user = request_user(request)
    form = FactForm(request.POST, user=user, auto_id="fact_%s")
    if form.is_valid():
        try:
            services.fact_create(user=user, content=form.cleaned_data["content"], project=form.cleaned_data["project"])
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Fact remembered.")
            return redirect("memory:index")
    return _index(request, fact_form=form, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def fact_edit(request: HttpRequest, fact_id: int) -> HttpResponse:
    user = request_user(request)
    fact = fact_get_for_user(user=user, fact_id=fact_id)
    if request.method == "GET":
        form = FactForm(user=user, initial={"content": fact.content, "project": fact.project_id})
        return render(request, "memory/facts_edit.html", {"form": form, "fact": fact})
    form = FactForm(request.POST, user=user)
    if form.is_valid():
        try:
            services.fact_update(fact=fact, content=form.cleaned_data["content"], project=form.cleaned_data["project"])
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Fact saved.")
            return redirect("memory:index")
    return render(request, "memory/facts_edit.html", {"form": form, "fact": fact}, status=400)


@login_required
@require_POST
def fact_delete(request: HttpRequest, fact_id: int) -> HttpResponse:
    services.fact_delete(fact=fact_get_for_user(user=request_user(request), fact_id=fact_id))
    messages.success(request, "Fact forgotten.")
    return redirect("memory:index")


@login_required
@require_POST
def goal_create(request: HttpRequest) -> HttpResponse:
    user = request_user(request)
    form = GoalForm(request.POST, user=user, auto_id="goal_%s")
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.goal_create(user=user, text=data["text"], deadline=data["deadline"], project=data["project"])
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Goal set.")
            return redirect("memory:index")
    return _index(request, goal_form=form, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def goal_edit(request: HttpRequest, goal_id: int) -> HttpResponse:
    user = request_user(request)
    goal = goal_get_for_user(user=user, goal_id=goal_id)
    if request.method == "GET":
        initial = {"text": goal.text, "deadline": goal.deadline, "project": goal.project_id}
        return render(request, "memory/facts_edit.html", {"form": GoalForm(user=user, initial=initial), "goal": goal})
    form = GoalForm(request.POST, user=user)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.goal_update(goal=goal, text=data["text"], deadline=data["deadline"], project=data["project"])
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Goal saved.")
            return redirect("memory:index")
    return render(request, "memory/facts_edit.html", {"form": form, "goal": goal}, status=400)


@login_required
@require_POST
def goal_complete(request: HttpRequest, goal_id: int) -> HttpResponse:
    goal = goal_get_for_user(user=request_user(request), goal_id=goal_id)
    try:
        services.goal_complete(goal=goal)
    except Conflict as exc:
        messages.warning(request, exc.message)
    else:
        messages.success(request, f"Completed: {goal.text}")
    return redirect("memory:index")


@login_required
@require_POST
def goal_delete(request: HttpRequest, goal_id: int) -> HttpResponse:
    services.goal_delete(goal=goal_get_for_user(user=request_user(request), goal_id=goal_id))
    messages.success(request, "Goal deleted.")
    return redirect("memory:index")
