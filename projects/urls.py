from __future__ import annotations

app_name = "projects"
urlpatterns: list = []
