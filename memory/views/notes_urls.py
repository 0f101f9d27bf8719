from __future__ import annotations

from django.urls import path

from . import notes as notes_views

urlpatterns = [
    path("agents/", notes_views.agent_list, name="notes-agents"),
    path("agents/<key:agent_id>/", notes_views.agent_detail, name="notes-agent"),
    path("agents/<key:agent_id>/append", notes_views.agent_append, name="notes-append"),
    path("agents/<key:agent_id>/promote/<id:entry_id>", notes_views.agent_promote, name="notes-promote"),
]
