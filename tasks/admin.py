from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString

from core.admin import admin_change_link, admin_changelist_link
from projects.admin import ProjectAdmin as ProjectsProjectAdmin
from projects.models import Project

from .models import Task, TaskStatusChange
from .services import EDITABLE_FIELDS, task_update


class TaskStatusChangeInline(admin.TabularInline):
    """The task's column history (audit rows: read-only)."""

    model = TaskStatusChange
    fields = ("created_at", "from_status", "to_status", "actor", "reason")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    """Tasks are created and moved on the board or through the API, where every move
    is checked and audited; here their text and labels can be corrected."""

    list_display = ("title", "project_link", "owner_link", "status", "category", "priority", "position", "updated_at")
    list_select_related = ("project__owner",)
    list_filter = ("status", "category", "priority", "created_at")
    search_fields = ("title", "project__name", "project__owner__email")
    fields = (
        "project",
        "owner_link",
        "title",
        "description",
        "category",
        "priority",
        "coder_agent",
        "status",
        "position",
        "subtasks",
        "pipeline_state",
        "created_at",
        "updated_at",
    )
    readonly_fields = (
        "project",
        "owner_link",
        "status",
        "position",
        "subtasks",
        "pipeline_state",
        "created_at",
        "updated_at",
    )
    inlines = [TaskStatusChangeInline]
    date_hierarchy = "created_at"

    @admin.display(description="Project", ordering="project__name")
    def project_link(self, task: Task) -> SafeString | str:
        return admin_change_link(task.project)

    @admin.display(description="Owner", ordering="project__owner__email")
    def owner_link(self, task: Task) -> SafeString | str:
        return admin_change_link(task.project.owner)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Task, form: ModelForm[Task], change: bool) -> None:
        changes = {field: form.cleaned_data[field] for field in form.changed_data if field in EDITABLE_FIELDS}
        task_update(task=obj, **changes)


@admin.register(TaskStatusChange)
class TaskStatusChangeAdmin(admin.ModelAdmin):
    """Audit rows: read-only. They go only with their task.

    The delete permission stays as the model permissions say, because deleting a task,
    project or user in the admin checks it for the rows that cascade; deleting a row on
    its own is refused instead (no delete view, action or button).
    """

    list_display = ("created_at", "task_link", "from_status", "to_status", "actor_link", "reason")
    list_select_related = ("task", "actor")
    list_filter = ("to_status", "from_status", "created_at")
    search_fields = ("task__title", "actor__email", "reason")
    date_hierarchy = "created_at"

    @admin.display(description="Task", ordering="task__title")
    def task_link(self, change: TaskStatusChange) -> SafeString | str:
        return admin_change_link(change.task)

    @admin.display(description="Actor", ordering="actor__email")
    def actor_link(self, change: TaskStatusChange) -> SafeString | str:
        return admin_change_link(change.actor)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "show_delete": False})

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        raise PermissionDenied


class ProjectAdmin(ProjectsProjectAdmin):
    """projects' project admin, with each project's tasks counted and linked."""

    list_display = ("name", "owner_link", "task_count", "created_at", "updated_at")
    fields = (*ProjectsProjectAdmin.fields[:-2], "task_count", "created_at", "updated_at")
    readonly_fields = ("task_count", "created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        return super().get_queryset(request).annotate(task_count=Count("tasks"))

    @admin.display(description="Tasks", ordering="task_count")
    def task_count(self, project: Project) -> SafeString | str:
        if project.pk is None:
            return "-"
        count = getattr(project, "task_count", 0)
        return admin_changelist_link(Task, f"{count} task{'s' if count != 1 else ''}", project__id__exact=project.pk)


admin.site.unregister(Project)
admin.site.register(Project, ProjectAdmin)
