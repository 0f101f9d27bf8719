from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.safestring import SafeString

from accounts.admin import UserAdmin as AccountsUserAdmin
from accounts.models import User
from core.admin import admin_change_link, admin_changelist_link

from .models import Project
from .services import LAST_PROJECT, project_delete


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    """Projects; the apps above add their own columns (tasks/admin.py: the tasks)."""

    list_display: tuple[str, ...] = ("name", "owner_link", "created_at", "updated_at")
    list_select_related = ("owner",)
    list_filter = ("created_at", "updated_at")
    search_fields = ("name", "description", "owner__email")
    autocomplete_fields = ("owner",)
    fields: ClassVar[tuple[str, ...]] = (
        "owner",
        "name",
        "description",
        # An operator's choice, so not checked like an owner's (projects/services.py).
        "llm_provider",
        "llm_base_url",
        "llm_model",
        "planner_model",
        "coder_model",
        "reviewer_model",
        "llm_max_tokens",
        "token_budget",
        "instructions",
        "learn_distil",
        "lesson_half_life_hours",
        "runs_at_once",
        "task_spend_ceiling_usd",
        "coder_agent",
        "created_at",
        "updated_at",
    )
    readonly_fields: ClassVar[tuple[str, ...]] = ("created_at", "updated_at")
    date_hierarchy = "created_at"

    @admin.display(description="Owner", ordering="owner__email")
    def owner_link(self, project: Project) -> SafeString | str:
        return admin_change_link(project.owner)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # Bulk delete would bypass the rule that every user keeps one project.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        project = self.get_object(request, unquote(object_id))
        context = {**(extra_context or {})}
        if project is not None and _is_last_project(project):
            context["show_delete"] = False
        return super().change_view(request, object_id, form_url, context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Not has_delete_permission: deleting a user cascades to their last project, and
        # that must stay possible.
        project = self.get_object(request, unquote(object_id))
        if project is not None and _is_last_project(project):
            messages.error(request, LAST_PROJECT)
            return redirect("admin:projects_project_change", project.pk)
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: Project) -> None:
        project_delete(project=obj)  # raises LastProject if a concurrent delete got there first


def _is_last_project(project: Project) -> bool:
    return not Project.objects.filter(owner_id=project.owner_id).exclude(pk=project.pk).exists()


class UserAdmin(AccountsUserAdmin):
    """accounts' user admin, with each user's projects counted and linked."""

    list_display = (*AccountsUserAdmin.list_display, "project_count")

    def get_queryset(self, request: HttpRequest) -> QuerySet[User]:
        return super().get_queryset(request).annotate(project_count=Count("projects"))

    @admin.display(description="Projects", ordering="project_count")
    def project_count(self, user: User) -> SafeString:
        count = getattr(user, "project_count", 0)
        return admin_changelist_link(Project, count, owner__id__exact=user.pk)


admin.site.unregister(User)
admin.site.register(User, UserAdmin)
