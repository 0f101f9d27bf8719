"""Memory pages, one URL module per area."""

from __future__ import annotations

from django.urls import include, path

app_name = "memory"
urlpatterns = [
    path("memory/", include("memory.views.facts_urls")),
    path("memory/", include("memory.views.semantic_urls")),
    path("memory/", include("memory.views.notes_urls")),
]
