from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "pipelines"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery.signals import beat_init, worker_init

        from .leases import sweeper_start

        worker_init.connect(import_llm_client, weak=False, dispatch_uid="pipelines.import_llm_client")
        # The sweeper runs wherever beat runs: the celery beat process, or the embedded
        # server's beat thread (config/embedded.py stops it with beat).
        beat_init.connect(sweeper_start, weak=False, dispatch_uid="pipelines.sweeper_start")


def import_llm_client(**kwargs: Any) -> None:
    """Import the Anthropic SDK when a worker starts, not in the first run's first call.

    The SDK's import is the slowest part of a worker's first LLM call (its types alone
    are hundreds of modules). A prefork worker imports it once, before it forks its
    children, so each child starts with it; the embedded worker imports it in its own
    thread while daphne already serves."""
    import pipelines.providers.anthropic  # noqa: F401
