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
    return JsonResponse(
        {"status": "ok" if healthy else "degraded", "database": database}, status=200 if healthy else 503
    )


def api_not_found(request: HttpRequest) -> JsonResponse:
    """Unknown /api/ paths get the API's error body instead of the HTML 404 page."""
    return JsonResponse({"message": "No such API endpoint.", "code": "not_found", "extra": {}}, status=404)
