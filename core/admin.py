"""Links between admin pages, shared by every app's admin."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import quote
from django.db.models import Model
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString


def admin_change_link(obj: Model | None, text: Any = None) -> SafeString | str:
    """A link to ``obj``'s admin change page, or "-" when there is no object."""
    if obj is None:
        return "-"
    # Quoted as the admin's own links are: it reads "_" as an escape in the URL, so a text
    # key like "ctx_23ab…" would otherwise name another object ("ctx#ab…").
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[quote(obj.pk)])
    return format_html('<a href="{}">{}</a>', url, obj if text is None else text)


def admin_changelist_link(model: type[Model], text: Any, **filters: Any) -> SafeString:
    """A link to ``model``'s admin changelist, narrowed by ``filters`` (field lookups)."""
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    if filters:
        url = f"{url}?{urlencode(filters)}"
    return format_html('<a href="{}">{}</a>', url, text)
