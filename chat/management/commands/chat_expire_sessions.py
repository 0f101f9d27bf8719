from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from chat.services import chat_sessions_expire


class Command(BaseCommand):
    help = "Close chat sessions idle for longer than CHAT_SESSION_TTL_HOURS."

    def handle(self, *args: Any, **options: Any) -> None:
        count = chat_sessions_expire()
        self.stdout.write(f"Closed {count} idle chat session{'s' if count != 1 else ''}.")
