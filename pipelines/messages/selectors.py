"""Reads of a run's messages (pipelines/messages/services.py)."""

from __future__ import annotations

from django.db.models import QuerySet

from pipelines.models import PipelineRun, RunMessage


def run_messages_for_run(*, run: PipelineRun) -> QuerySet[RunMessage]:
    """The run's messages, oldest first, read or waiting."""
    return RunMessage.objects.filter(run=run).select_related("author").order_by("created_at", "id")
