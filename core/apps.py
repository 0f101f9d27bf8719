from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Before any URLconf is imported: the apps' patterns use <id:…> and <key:…>.
        from . import converters

        converters.register()
