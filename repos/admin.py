from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import BaseTestResult, PreparedEnvironment, ProjectVariable, Repository, RepositoryFolder


@admin.register(Repository)
class RepositoryAdmin(admin.ModelAdmin):
    list_display = ("project", "path", "base_branch", "merge_strategy", "status", "merge_when_green", "updated_at")
    list_filter = ("status", "merge_strategy", "merge_when_green", "base_update")
    search_fields = ("path", "origin_url", "project__name", "project__owner__email")
    list_select_related = ("project",)
    raw_id_fields = ("project",)
    readonly_fields = (
        "forge_login",
        "forge_issues_since",
        "forge_issues_checked_at",
        "forge_issues_error",
        "created_at",
        "updated_at",
    )


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


@admin.register(PreparedEnvironment)
class PreparedEnvironmentAdmin(admin.ModelAdmin):
    """Kept environments: what each cost and when it was last used. Deleting one here
    removes its row only; beat's eviction (or Rebuild on the page) removes files."""

    list_display = ("repository", "short_key", "status", "source", "size_bytes", "duration_ms", "last_used_at")
    list_filter = ("status",)
    search_fields = ("key", "repository__path", "repository__project__name")
    list_select_related = ("repository",)
    readonly_fields = [field.name for field in PreparedEnvironment._meta.fields]

    @admin.display(description="key")
    def short_key(self, prepared: PreparedEnvironment) -> str:
        return prepared.key[:12]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(BaseTestResult)
class BaseTestResultAdmin(admin.ModelAdmin):
    """The test command on base commits, kept so that runs tell new failures from old."""

    list_display = ("repository", "base_commit", "test_command", "passed", "exit_code", "created_at")
    list_filter = ("passed",)
    search_fields = ("base_commit", "repository__path")
    list_select_related = ("repository",)
    readonly_fields = [field.name for field in BaseTestResult._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
