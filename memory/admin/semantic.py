"""Admin for semantic memories: browse and search; the embedding stays out of sight."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from core.admin import admin_change_link
from memory.models import Memory, MemoryUse
from memory.selectors.semantic import memory_confidence


class MemoryUseInline(admin.TabularInline):
    """The runs that were given the memory: a record, not edited by hand."""

    model = MemoryUse
    fields = ("run_id", "agent", "used_at")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ("-used_at", "-id")


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    inlines = (MemoryUseInline,)
    list_display = (
        "short_content",
        "owner_link",
        "source",
        "source_run_id",
        "memory_type",
        "decay_policy",
        "confidence",
        "reinforce_count",
        "is_deleted",
        "created_at",
    )
    list_select_related = ("owner", "project")
    list_filter = (
        "source",
        "decay_policy",
        "is_deleted",
        ("stale_at", admin.EmptyFieldListFilter),
        "path_scoped",
        "is_global",
        "memory_type",
        "created_at",
    )
    search_fields = ("content", "applies_when", "source_note", "owner__email", "agent", "personality", "project__name")
    raw_id_fields = ("owner", "project")
    exclude = ("embedding",)
    # applies_when is embedded with the content: it is edited on the Memories page or
    # through the API, which embed it again.
    readonly_fields = (
        "applies_when",
        "content_hash",
        "embedding_model",
        "embedding_summary",
        "confidence",
        "reinforce_count",
        "unpinned_policy",
        "deleted_at",
        "updated_at",
        # Kept in step with each other by memory.services.semantic (the Memory page's
        # "Apply to the whole project" changes them).
        "citations",
        "path_scoped",
        "checked_commit",
        "stale_at",
        "stale_reason",
    )
    date_hierarchy = "created_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Memory]:
        return super().get_queryset(request).defer("embedding")

    @admin.display(description="Content", ordering="content")
    def short_content(self, memory: Memory) -> str:
        return str(memory)

    @admin.display(description="Owner", ordering="owner__email")
    def owner_link(self, memory: Memory) -> SafeString | str:
        return admin_change_link(memory.owner)

    @admin.display(description="Confidence")
    def confidence(self, memory: Memory) -> str:
        return f"{memory_confidence(memory=memory):.2f}"

    @admin.display(description="Embedding")
    def embedding_summary(self, memory: Memory) -> str:
        size = 0 if memory.embedding is None else len(memory.embedding)
        return f"{size} dimensions ({memory.embedding_model or 'none'})"
