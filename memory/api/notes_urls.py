from __future__ import annotations

from django.urls import path

from . import notes

urlpatterns = [
    path("agents/<str:agent_id>/notes", notes.AgentNotesApi.as_view(), name="memory-agent-notes"),
    path("agents/<str:agent_id>/promote", notes.AgentPromoteApi.as_view(), name="memory-agent-promote"),
    path("agents/<str:agent_id>/daily/<str:day>", notes.AgentDailyLogApi.as_view(), name="memory-agent-daily"),
]
