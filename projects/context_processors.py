from __future__ import annotations

from typing import Any

from django.http import HttpRequest


def current_project(request: HttpRequest) -> dict[str, Any]:
    """Placeholder: the pages helper fills in the project switcher context."""
    return {}
