from __future__ import annotations

app_name = "tasks"
urlpatterns: list = []
