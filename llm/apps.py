from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class LlmConfig(AppConfig):
    name = "llm"
    verbose_name = "LLM providers"

    def ready(self) -> None:
        from celery.signals import worker_init

        worker_init.connect(import_llm_client, weak=False, dispatch_uid="llm.import_llm_client")


def import_llm_client(**kwargs: Any) -> None:
    """Import the Anthropic SDK when a worker starts, not in the first run's first call.

    The SDK's import is the slowest part of a worker's first LLM call (its types alone
    are hundreds of modules). A prefork worker imports it once, before it forks its
    children, so each child starts with it; the embedded worker imports it in its own
    thread while daphne already serves."""
    import llm.providers.anthropic  # noqa: F401
