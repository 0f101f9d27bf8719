"""Admin for chat sessions: each conversation with its messages inline."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from chat.models import ChatMessage, ChatSession
from core.leases import lease_held


class ChatMessageInline(admin.TabularInline):
    model = ChatMessage
    fk_name = "session"
    extra = 0
    fields = ("created_at", "role", "status", "text", "confirmations", "attachment_type", "reply_to")
    readonly_fields = ("created_at", "reply_to", "attachment_type")
    ordering = ("created_at", "id")
    show_change_link = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[ChatMessage]:
        return super().get_queryset(request).defer("attachment")


class ProcessingFilter(admin.SimpleListFilter):
    """Sessions a worker is answering now: it holds their lease, unexpired."""

    title = "processing"
    parameter_name = "processing"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[ChatSession]) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ChatSession]) -> QuerySet[ChatSession]:
        if self.value() == "yes":
            return queryset.filter(lease_held())
        if self.value() == "no":
            return queryset.exclude(lease_held())
        return queryset


@admin.register(ChatSession)
class ChatSessionAdmin(admin.ModelAdmin):
    list_display = ("id", "user", "project", "message_count", "last_activity", "processing", "closed_at")
    list_select_related = ("user", "project")
    list_filter = (ProcessingFilter, "closed_at")
    search_fields = ("user__email", "project__name", "provider_session_id")
    raw_id_fields = ("user", "project")
    readonly_fields = ("created_at",)
    date_hierarchy = "last_activity"
    inlines = [ChatMessageInline]

    @admin.display(boolean=True, description="processing")
    def processing(self, session: ChatSession) -> bool:
        return session.processing
