"""The places in line of the signed-in user's waiting runs, for the board's cards.

Lazy: read (one query for the whole page) only when a page shows a queued run's card.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from pipelines.runs.places import run_queue_positions


def run_queue_places(request: HttpRequest) -> dict[str, Any]:
    def places() -> dict[int, int]:
        # Not even the user is loaded before a card asks.
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return {}
        return run_queue_positions(owner_id=user.pk)

    return {"run_queue_places": SimpleLazyObject(places)}
