from __future__ import annotations

from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "pipelines"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery.signals import beat_init

        from .leases import sweeper_start

        # The sweeper runs wherever beat runs: the celery beat process, or the embedded
        # server's beat thread (config/embedded.py stops it with beat).
        beat_init.connect(sweeper_start, weak=False, dispatch_uid="pipelines.sweeper_start")
