from __future__ import annotations

from django.urls import path

from pipelines import consumers

websocket_urlpatterns = [
    path("ws/tasks/<str:object_id>", consumers.TaskEventsConsumer.as_asgi()),
    path("ws/projects/<str:object_id>", consumers.ProjectBoardConsumer.as_asgi()),
]
