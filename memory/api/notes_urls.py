from __future__ import annotations

from django.urls import path

from . import notes

urlpatterns = [
    path("agents/<key:agent_id>/notes", notes.AgentNotesApi.as_view(), name="memory-agent-notes"),
    path("agents/<key:agent_id>/promote", notes.AgentPromoteApi.as_view(), name="memory-agent-promote"),
    path("agents/<key:agent_id>/daily/<key:day>", notes.AgentDailyLogApi.as_view(), name="memory-agent-daily"),
]
