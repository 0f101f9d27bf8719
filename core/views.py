from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from . import health


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Readiness for load balancers, without a login: 200 while the database, broker and
    channel layer answer (a missing worker only makes the status "degraded"), else 503.
    """
    report = health.system_health()
    return JsonResponse(report.as_dict(), status=200 if report.healthy else 503)


@csrf_exempt
def api_not_found(request: HttpRequest) -> JsonResponse:
    """Unknown /api/ paths get the API's error body instead of the HTML 404 page; for a
    POST too, which would otherwise meet the CSRF check first (an HTML 403). It changes
    nothing, so it needs no CSRF protection."""
    return JsonResponse({"message": "No such API endpoint.", "code": "not_found", "extra": {}}, status=404)


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """The icon's address, asked for by the admin's pages and by browsers on their own.
    Resolved per request: the static files' manifest exists only once they are collected."""
    return HttpResponsePermanentRedirect(static("img/favicon.svg"))
