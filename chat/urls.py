from __future__ import annotations

from django.urls import path

from . import views

app_name = "chat"
urlpatterns = [
    path("", views.chat_page, name="page"),
    path("messages/", views.chat_messages, name="messages"),
]
