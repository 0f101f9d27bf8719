from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from accounts.selectors import request_user
from core.admin import admin_change_link
from core.exceptions import ApplicationError
from pipelines.models import AgentCall, PipelineRun, RunEvent, RunLineComment, RunTransition
from pipelines.runs.services import run_cancel, run_retry


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class RunTransitionInline(_ReadOnlyInline):
    model = RunTransition
    fields = ("created_at", "from_status", "to_status", "reason", "actor")
    readonly_fields = fields
    show_change_link = False


class AgentCallInline(_ReadOnlyInline):
    model = AgentCall
    fields = (
        "created_at",
        "agent",
        "phase",
        "iteration",
        "attempt",
        "outcome",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "duration_ms",
    )
    readonly_fields = fields


class RunLineCommentInline(_ReadOnlyInline):
    model = RunLineComment
    fields = ("created_at", "author", "path", "line_start", "line_end", "body", "feedback_round", "addressed", "reply")
    readonly_fields = fields
    show_change_link = False


class RunEventInline(_ReadOnlyInline):
    model = RunEvent
    fields = ("id", "created_at", "type", "data")
    readonly_fields = fields
    show_change_link = False
    classes = ("collapse",)


@admin.register(PipelineRun)
class PipelineRunAdmin(admin.ModelAdmin):
    list_display = (
        "__str__",
        "task_link",
        "owner",
        "status",
        "phase",
        "iteration",
        "total_tokens",
        "cost_usd",
        "created_at",
    )
    list_select_related = ("task__project__owner",)
    list_filter = ("status", "phase", "provider", "model", "coder_agent", "created_at")
    search_fields = ("task__title", "task__project__name", "task__project__owner__email", "error")
    readonly_fields = [field.name for field in PipelineRun._meta.fields if field.name != "api_key_encrypted"]
    exclude = ("api_key_encrypted",)
    inlines = [RunTransitionInline, AgentCallInline, RunLineCommentInline, RunEventInline]
    actions = ("cancel_runs", "retry_runs")
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="Task", ordering="task__title")
    def task_link(self, run: PipelineRun) -> SafeString | str:
        return admin_change_link(run.task)

    @admin.display(description="Owner", ordering="task__project__owner__email")
    def owner(self, run: PipelineRun) -> SafeString | str:
        return admin_change_link(run.task.project.owner)

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[PipelineRun]) -> None:
        self._apply(request, queryset, lambda run: run_cancel(run=run, actor=request_user(request)), "cancelled")

    @admin.action(description="Retry the selected runs (resume paused ones, restart the others)")
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[PipelineRun]) -> None:
        self._apply(request, queryset, lambda run: run_retry(run=run, actor=request_user(request)), "retried")

    def _apply(self, request: HttpRequest, queryset: QuerySet[PipelineRun], action: Any, verb: str) -> None:
        done = 0
        for run in queryset.select_related("task__project"):
            try:
                action(run)
                done += 1
            except ApplicationError as exc:
                self.message_user(request, f"{run}: {exc.message}", messages.WARNING)
        if done:
            self.message_user(request, f"{done} run(s) {verb}.", messages.SUCCESS)


@admin.register(AgentCall)
class AgentCallAdmin(admin.ModelAdmin):
    list_display = (
        "__str__",
        "run",
        "agent",
        "phase",
        "outcome",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "created_at",
    )
    list_filter = ("agent", "outcome", "phase")
    search_fields = ("run__task__title", "error")
    readonly_fields = [field.name for field in AgentCall._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
