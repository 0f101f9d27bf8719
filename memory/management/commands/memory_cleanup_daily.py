from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from memory.services.notes import daily_cleanup_old


class Command(BaseCommand):
    help = "Delete daily log entries older than the retention (also run by Celery beat)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days", type=int, default=None, help="Retention in days (default: DAILY_LOG_RETENTION_DAYS)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"] if options["days"] is not None else settings.DAILY_LOG_RETENTION_DAYS
        count = daily_cleanup_old(retention_days=days)
        self.stdout.write(f"Deleted {count} daily log entr{'y' if count == 1 else 'ies'} older than {days} days.")
