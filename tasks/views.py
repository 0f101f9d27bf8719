"""The kanban board and the task pages: thin views over tasks.services/selectors."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.selectors import request_user
from core.exceptions import InvalidTransition
from core.forms import add_service_errors
from projects.context_processors import get_current_project, set_current_project
from projects.models import Project
from projects.selectors import project_get_for_user

from . import services
from .forms import BoardFilterForm, TaskForm, TaskMoveForm
from .models import MANUAL_TRANSITIONS, Task, TaskCategory, TaskStatus, allowed_moves
from .selectors import BOARD_COLUMN_CAP, BoardColumn, task_board, task_board_column, task_get_for_user, task_history

# What an empty column says, in board order.
EMPTY_HINTS: dict[str, str] = {
    TaskStatus.BACKLOG: "Nothing in the backlog. Add a task below to get started.",
    TaskStatus.SPEC: "Tasks being planned show up here: start a task's pipeline from its page.",
    TaskStatus.BUILDING: "Tasks being coded show up here.",
    TaskStatus.REVIEW: "Finished work waits here for your review.",
    TaskStatus.DONE: "Approved tasks land here.",
}


@login_required
@require_GET
def board(request: HttpRequest) -> HttpResponse:
    user = request_user(request)
    if request.GET.get("project"):
        set_current_project(request, project_get_for_user(user=user, project_id=request.GET["project"]))
    # The switcher's copy of the project carries its task count.
    project = get_current_project(request)
    if project is None:
        return render(request, "tasks/no_project.html")

    filters = BoardFilterForm(request.GET)
    filters.is_valid()  # A bad value is dropped (cleaned_data keeps the good ones), never an error page.
    category = filters.cleaned_data.get("category") or None
    q = filters.cleaned_data.get("q") or None
    more_status = request.GET.get("column")
    if more_status:
        return _board_column_more(request, project, more_status, category=category, q=q)
    grouped = task_board(user=user, project=project, category=category, q=q)
    columns = [
        {
            "status": status,
            "label": label,
            "tasks": grouped[status].tasks,
            "total": grouped[status].total,
            "more": _more_link(request, grouped[status]),
            "empty_hint": EMPTY_HINTS[status],
        }
        for status, label in TaskStatus.choices
    ]
    context: dict[str, Any] = {
        "project": project,
        "columns": columns,
        "filters": filters,
        "filtered": bool(category or q),
        "q": q,
        "category_label": TaskCategory(category).label if category else "",
        "shown_count": sum(column.total for column in grouped.values()),
        "transitions": {status: sorted(targets) for status, targets in MANUAL_TRANSITIONS.items()},
        "task_form": TaskForm(initial={"project": project.pk}),
    }
    if request.htmx and not request.htmx.history_restore_request:  # type: ignore[attr-defined]
        response = render(request, "tasks/_board.html", context)
    else:
        response = render(request, "tasks/board.html", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _more_link(request: HttpRequest, column: BoardColumn) -> dict[str, Any] | None:
    """The "Show more" link after a capped slice of a column: its URL keeps the board's
    filters and asks for the next slice; None when the column has been shown to the end."""
    if not column.remaining:
        return None
    query = request.GET.copy()
    query.pop("project", None)  # the current project is in the session by now
    query["column"] = column.status
    query["offset"] = str(column.offset + len(column.tasks))
    return {
        "url": f"{reverse('tasks:board')}?{query.urlencode()}",
        "next": min(column.remaining, BOARD_COLUMN_CAP),
        "remaining": column.remaining,
    }


def _board_column_more(
    request: HttpRequest, project: Project, status: str, *, category: str | None, q: str | None
) -> HttpResponse:
    """The next slice of one column: cards appended to the column's list out of band,
    and the link replaced by the next one (or by nothing at the end)."""
    if status not in TaskStatus.values:
        raise Http404("No such column.")
    try:
        offset = max(0, int(request.GET.get("offset", "0")))
    except ValueError:
        offset = 0
    column = task_board_column(
        user=request_user(request),
        project=project,
        status=status,
        offset=offset,
        category=category,
        q=q,
    )
    context = {"column": {"status": status, "tasks": column.tasks, "more": _more_link(request, column)}}
    response = render(request, "tasks/_column_more.html", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_http_methods(["GET", "POST"])
def task_create(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        project = get_current_project(request)
        if project is None:
            return redirect("projects:create")
        return render(request, "tasks/create.html", {"form": TaskForm(initial={"project": project.pk})})

    form = TaskForm(request.POST)
    project_id = request.POST.get("project")
    user = request_user(request)
    project = project_get_for_user(user=user, project_id=project_id) if project_id else get_current_project(request)
    if project is None:
        messages.error(request, "Create a project first: tasks live in a project.")
        return redirect("projects:create")
    if form.is_valid():
        data = form.cleaned_data
        try:
            task = services.task_create(
                project=project,
                title=data["title"],
                description=data["description"],
                category=data["category"],
                priority=data["priority"],
                coder_agent=data["coder_agent"],
                actor=user,
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            set_current_project(request, project)
            messages.success(request, f"Task “{task.title}” added to the backlog.")
            return redirect("tasks:board")
    if request.POST.get("from") == "board":
        # The board's quick-add box: back to the board, saying what was wrong, rather
        # than to another page for one field.
        problems = [
            f"{form.fields[name].label or name.capitalize() if name in form.fields else ''}: {message}".lstrip(": ")
            for name, errors in form.errors.items()
            for message in errors
        ]
        messages.error(request, "The task was not added. " + " ".join(problems))
        return redirect("tasks:board")
    return render(request, "tasks/create.html", {"form": form}, status=400)


def _detail_context(task: Task, **extra: Any) -> dict[str, Any]:
    allowed = allowed_moves(task.status)
    labels = dict(TaskStatus.choices)
    return {
        "task": task,
        "move_choices": [(status, labels[status]) for status in allowed],
        "history": task_history(task=task),
        **extra,
    }


def _edit_form(task: Task) -> TaskForm:
    return TaskForm(
        initial={
            "title": task.title,
            "description": task.description,
            "category": task.category,
            "priority": task.priority,
            "coder_agent": task.coder_agent,
        }
    )


@login_required
@require_GET
def task_card(request: HttpRequest, task_id: int) -> HttpResponse:
    """One board card, as the board shows it: the live board fetches it again when the
    task's run changes (static/js/board_live.js)."""
    task = task_get_for_user(user=request_user(request), task_id=task_id)
    return render(request, "tasks/_card.html", {"task": task})


@login_required
@require_http_methods(["GET", "POST"])
def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    task = task_get_for_user(user=request_user(request), task_id=task_id)
    # The header names the open task's project, and Board leads back to it.
    set_current_project(request, task.project)
    if request.method == "GET":
        return render(request, "tasks/detail.html", _detail_context(task, form=_edit_form(task)))

    form = TaskForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.task_update(
                task=task,
                title=data["title"],
                description=data["description"],
                category=data["category"] or None,
                priority=data["priority"] or None,
                # Only the full edit form has it: a form without it changes nothing.
                coder_agent=data["coder_agent"] if "coder_agent" in request.POST else None,
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Task saved.")
            return redirect("tasks:detail", task_id=task.pk)
    task.refresh_from_db()  # The page shows the saved task beside the rejected input.
    return render(request, "tasks/detail.html", _detail_context(task, form=form), status=400)


@login_required
@require_GET
def task_activity(request: HttpRequest, task_id: int) -> HttpResponse:
    """The task page's Activity list alone, fetched again when the pipeline moves the card."""
    task = task_get_for_user(user=request_user(request), task_id=task_id)
    return render(request, "tasks/_activity.html", {"task": task, "history": task_history(task=task)})


@login_required
@require_POST
def task_move(request: HttpRequest, task_id: int) -> HttpResponse:
    """The no-drag way to change a task's column (the board drags through the API)."""
    task = task_get_for_user(user=request_user(request), task_id=task_id)
    form = TaskMoveForm(request.POST)
    if form.is_valid():
        status = form.cleaned_data["status"]
        try:
            services.task_move(
                task=task,
                status=status,
                position=form.cleaned_data["position"],
                actor=request_user(request),
            )
        except InvalidTransition as exc:
            form.add_error("status", exc.message)
        else:
            messages.success(request, f"Moved to {TaskStatus(status).label}.")
            target = request.POST.get("next")
            if target and url_has_allowed_host_and_scheme(
                target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
            ):
                return redirect(target)
            return redirect("tasks:detail", task_id=task.pk)
    task.refresh_from_db()
    context = _detail_context(task, form=_edit_form(task), move_form=form)
    return render(request, "tasks/detail.html", context, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def task_delete(request: HttpRequest, task_id: int) -> HttpResponse:
    task = task_get_for_user(user=request_user(request), task_id=task_id)
    if request.method == "GET":
        return render(request, "tasks/delete.html", {"task": task})
    title = task.title
    services.task_delete(task=task)
    messages.success(request, f"Task “{title}” deleted.")
    return redirect("tasks:board")
