from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import ProjectVariable, Repository, RepositoryFolder


@admin.register(Repository)
class RepositoryAdmin(admin.ModelAdmin):
    list_display = ("project", "path", "base_branch", "merge_strategy", "status", "updated_at")
    list_filter = ("status", "merge_strategy")
    search_fields = ("path", "origin_url", "project__name", "project__owner__email")
    list_select_related = ("project",)
    raw_id_fields = ("project",)
    readonly_fields = ("created_at", "updated_at")


@admin.register(RepositoryFolder)
class RepositoryFolderAdmin(admin.ModelAdmin):
    """Who may use which folder under REPOS_ROOT. To grant a server folder to users, add
    it here with an owner, or share an existing one."""

    list_display = ("path", "owner", "project", "created_at")
    search_fields = ("path", "owner__email", "project__name")
    list_select_related = ("owner", "project")
    raw_id_fields = ("owner", "project")
    filter_horizontal = ("shared_with",)
    readonly_fields = ("created_at", "updated_at")


@admin.register(ProjectVariable)
class ProjectVariableAdmin(admin.ModelAdmin):
    """Names only: values are never decrypted here (the owner sets them on the
    Repository page or the API; an operator can remove one)."""

    list_display = ("name", "project", "secret", "updated_at")
    list_filter = ("secret",)
    search_fields = ("name", "project__name", "project__owner__email")
    list_select_related = ("project",)
    fields = ("project", "name", "secret", "created_at", "updated_at")
    readonly_fields = ("project", "name", "secret", "created_at", "updated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a value is set where it is encrypted and checked: the page or the API
