from __future__ import annotations

from django.contrib import admin

from .models import Repository, RepositoryFolder


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
