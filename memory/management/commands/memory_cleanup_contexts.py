from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory.services.context import context_delete_expired


class Command(BaseCommand):
    help = "Delete expired context items (also run by Celery beat)."

    def handle(self, *args: Any, **options: Any) -> None:
        count = context_delete_expired()
        self.stdout.write(f"Deleted {count} expired context item(s).")
