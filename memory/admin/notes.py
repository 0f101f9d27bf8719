from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memory.models import AgentNote, AgentNoteRevision, DailyLogEntry


class AgentNoteRevisionInline(admin.TabularInline):
    model = AgentNoteRevision
    extra = 0
    can_delete = False
    readonly_fields = ("reason", "created_at", "content")
    fields = ("created_at", "reason", "content")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AgentNote)
class AgentNoteAdmin(admin.ModelAdmin):
    list_display = ("agent_id", "owner", "project_or_global", "updated_at")
    list_filter = ("agent_id", ("project", admin.EmptyFieldListFilter), ("project", admin.RelatedOnlyFieldListFilter))
    search_fields = ("agent_id", "owner__email", "project__name", "content")
    list_select_related = ("owner", "project")
    raw_id_fields = ("owner", "project")

    @admin.display(description="project", ordering="project__name")
    def project_or_global(self, note: AgentNote) -> str:
        return note.project.name if note.project else "every project (global)"

    inlines = [AgentNoteRevisionInline]


@admin.register(DailyLogEntry)
class DailyLogEntryAdmin(admin.ModelAdmin):
    list_display = ("date", "agent_id", "session", "type", "status", "duration_ms", "promoted", "owner")
    list_filter = ("status", "agent_id", "type", "promoted", "date")
    search_fields = ("session", "error", "owner__email", "output_context_id")
    list_select_related = ("owner",)
    date_hierarchy = "date"
    raw_id_fields = ("owner",)
