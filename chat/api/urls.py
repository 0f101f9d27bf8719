from __future__ import annotations

from django.urls import path

from .views import ChatMessagesApi, ChatSessionApi

urlpatterns = [
    path("messages", ChatMessagesApi.as_view(), name="chat-messages"),
    path("session", ChatSessionApi.as_view(), name="chat-session"),
]
