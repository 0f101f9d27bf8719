from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from core.views import api_not_found

api_patterns: list[URLPattern | URLResolver] = [
    path("auth/", include("accounts.api.urls")),
    path("", include("projects.api.urls")),
    path("", include("repos.api.urls")),
    path("", include("tasks.api.urls")),
    path("", include("pipelines.api.urls")),
    path("", include("memory.api.urls")),
    path("chat/", include("chat.api.urls")),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file: no inline script for the CSP to refuse.
    path(
        "docs", SpectacularSwaggerSplitView.as_view(url_name="api:schema", template_name="api/docs.html"), name="docs"
    ),
    # Last: any other /api/ path answers in the API's error shape, not an HTML page.
    re_path(r"^.*$", api_not_found),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include((api_patterns, "api"))),
    path("", include("core.urls")),
    path("accounts/", include("accounts.urls")),
    path("projects/", include("projects.urls")),
    path("projects/", include("repos.urls")),
    path("", include("tasks.urls")),
    path("", include("pipelines.urls")),
    path("", include("memory.urls")),
    path("chat/", include("chat.urls")),
]
