from __future__ import annotations

from django.urls import path

from . import semantic

urlpatterns = [
    path("memories", semantic.MemoryCreateApi.as_view(), name="semantic-memory-create"),
    path("memories/search", semantic.MemorySearchApi.as_view(), name="semantic-memory-search"),
    path("memories/<str:memory_id>", semantic.MemoryDetailApi.as_view(), name="semantic-memory-detail"),
    path("memories/<str:memory_id>/reinforce", semantic.MemoryReinforceApi.as_view(), name="semantic-memory-reinforce"),
    path("status", semantic.MemoryStatusApi.as_view(), name="semantic-memory-status"),
]
