from __future__ import annotations

from django.urls import path

from . import context

urlpatterns = [
    path("contexts", context.ContextListApi.as_view(), name="memory-context-list"),
    path("contexts/<str:context_id>", context.ContextDetailApi.as_view(), name="memory-context-detail"),
    path("contexts/<str:context_id>/touch", context.ContextTouchApi.as_view(), name="memory-context-touch"),
    path("contexts/<str:context_id>/lineage", context.ContextLineageApi.as_view(), name="memory-context-lineage"),
]
