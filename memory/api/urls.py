from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("memory/", include("memory.api.facts_urls")),
    path("memory/", include("memory.api.semantic_urls")),
    path("memory/", include("memory.api.context_urls")),
    path("memory/", include("memory.api.notes_urls")),
]
