from __future__ import annotations

from django.urls import path

from . import chat_views

urlpatterns = [
    path("", chat_views.chat_page, name="chat"),
]
