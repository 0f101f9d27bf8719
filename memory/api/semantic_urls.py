from __future__ import annotations

from django.urls import path

from . import semantic

urlpatterns = [
    path("memories", semantic.MemoryListCreateApi.as_view(), name="semantic-memory-list"),
    path("memories/search", semantic.MemorySearchApi.as_view(), name="semantic-memory-search"),
    path("memories/<str:memory_id>", semantic.MemoryDetailApi.as_view(), name="semantic-memory-detail"),
    path("memories/<str:memory_id>/reinforce", semantic.MemoryReinforceApi.as_view(), name="semantic-memory-reinforce"),
    path(
        "memories/<str:memory_id>/generalise", semantic.MemoryGeneraliseApi.as_view(), name="semantic-memory-generalise"
    ),
    path("memories/<str:memory_id>/share", semantic.MemoryShareApi.as_view(), name="semantic-memory-share"),
    path("memories/<str:memory_id>/unshare", semantic.MemoryUnshareApi.as_view(), name="semantic-memory-unshare"),
    path("memories/<str:memory_id>/pin", semantic.MemoryPinApi.as_view(), name="semantic-memory-pin"),
    path("memories/<str:memory_id>/unpin", semantic.MemoryUnpinApi.as_view(), name="semantic-memory-unpin"),
    path("status", semantic.MemoryStatusApi.as_view(), name="semantic-memory-status"),
]
