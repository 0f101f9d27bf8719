from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from core.admin import admin_change_link
from memory.models import ContextItem
from memory.services.context import context_decode

PREVIEW_MAX = 20_000


@admin.register(ContextItem)
class ContextItemAdmin(admin.ModelAdmin):
    class Media:
        css = {"all": ("css/admin_context.css",)}

    list_display = ("id", "type", "agent_id", "owner", "run", "size_bytes", "access_count", "created_at", "expires_at")
    list_filter = ("type", "agent_id", "compression")
    search_fields = ("id", "content_hash", "owner__email")
    list_select_related = ("owner", "run")
    date_hierarchy = "created_at"
    readonly_fields = (
        "id",
        "owner_link",
        "run_link",
        "type",
        "agent_id",
        "compression",
        "content_hash",
        "size_bytes",
        "parent_ids",
        "metadata",
        "created_at",
        "expires_at",
        "accessed_at",
        "access_count",
        "content_preview",
    )
    exclude = ("content", "embedding", "owner", "run")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Owner")
    def owner_link(self, item: ContextItem) -> SafeString:
        url = reverse("admin:accounts_user_change", args=[item.owner_id])
        return format_html('<a href="{}">{}</a>', url, item.owner)

    @admin.display(description="Run")
    def run_link(self, item: ContextItem) -> SafeString | str:
        if item.run_id is None:
            return "—"
        return admin_change_link(item.run)

    @admin.display(description="Content (decompressed)")
    def content_preview(self, item: ContextItem) -> SafeString:
        try:
            text = json.dumps(context_decode(item), indent=2, ensure_ascii=False)
        except (OSError, ValueError) as exc:
            text = f"Unreadable content: {exc}"
        if len(text) > PREVIEW_MAX:
            text = text[:PREVIEW_MAX] + "\n… (truncated)"
        # Styled by admin_context.css: the Content-Security-Policy allows no inline style.
        return format_html('<pre class="context-preview">{}</pre>', text)
