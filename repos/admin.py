from __future__ import annotations

from django.contrib import admin

from .models import Repository


@admin.register(Repository)
class RepositoryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("project", "path", "base_branch", "merge_strategy", "status", "updated_at")
    list_filter = ("status", "merge_strategy")
    search_fields = ("path", "origin_url", "project__name", "project__owner__email")
    list_select_related = ("project",)
    raw_id_fields = ("project",)
    readonly_fields = ("created_at", "updated_at")
