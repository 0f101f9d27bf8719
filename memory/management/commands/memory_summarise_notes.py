from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory.services.notes import notes_summarise_long


class Command(BaseCommand):
    help = "Summarise agent notes longer than AGENT_NOTES_MAX_CHARS with the LLM (also run by Celery beat)."

    def handle(self, *args: Any, **options: Any) -> None:
        count = notes_summarise_long()
        self.stdout.write(f"Summarised {count} agent note(s).")
