from __future__ import annotations

app_name = "accounts"
urlpatterns: list = []
