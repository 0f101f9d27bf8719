from __future__ import annotations

from django.urls import path

from . import context

urlpatterns = [
    path("contexts", context.ContextListApi.as_view(), name="memory-context-list"),
    path("contexts/<key:context_id>", context.ContextDetailApi.as_view(), name="memory-context-detail"),
    path("contexts/<key:context_id>/touch", context.ContextTouchApi.as_view(), name="memory-context-touch"),
    path("contexts/<key:context_id>/lineage", context.ContextLineageApi.as_view(), name="memory-context-lineage"),
]
