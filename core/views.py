from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: answers without a login."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database = "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means "not healthy"
        database = f"error: {exc.__class__.__name__}"
    healthy = database == "ok"
    return JsonResponse({"status": "ok" if healthy else "degraded", "database": database}, status=200 if healthy else 503)
