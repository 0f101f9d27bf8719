from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.handlers.exception import response_for_exception
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render

from .exceptions import NotFound


class ApiTrailingSlashMiddleware:
    """Let every API path answer with or without a trailing slash.

    The URLconf and the OpenAPI schema name each endpoint once, without the slash;
    ``/api/projects/`` is served by the same view as ``/api/projects`` (no redirect, so
    a POST body is never dropped on the way).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if path.startswith("/api/") and len(path) > len("/api/") and path.endswith("/"):
            request.path_info = path.rstrip("/")
        return self.get_response(request)


class ContentSecurityPolicyMiddleware:
    """Send settings.CONTENT_SECURITY_POLICY on every response (as
    Content-Security-Policy-Report-Only when CONTENT_SECURITY_POLICY_REPORT_ONLY is set).

    A response that already has a policy keeps it. Templates therefore load scripts and
    styles from static files: no inline <script> or <style>, no ``on*=""`` handlers, no
    ``style=""`` attributes (static/js/app.js applies ``data-width`` and friends).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = " ".join(settings.CONTENT_SECURITY_POLICY.split())
        self.header = (
            "Content-Security-Policy-Report-Only"
            if settings.CONTENT_SECURITY_POLICY_REPORT_ONLY
            else "Content-Security-Policy"
        )

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.policy and not response.has_header(self.header):
            response[self.header] = self.policy
        return response


NUL_NOT_ALLOWED = "Null characters are not allowed."  # as Django's form CharField says it


def _names_with_nul(data: QueryDict) -> list[str]:
    return [name for name, values in data.lists() if "\x00" in name or any("\x00" in value for value in values)]


class NulCharacterMiddleware:
    """Refuse a NUL character in a page's path (a 404), query string or submitted form
    (a 400 naming the fields).

    No key or field means anything by a NUL, and PostgreSQL can neither store nor compare
    text that holds one (the query fails: a 500). Django's form CharField refuses NUL, but
    views that read request.GET or request.POST directly, or filter by a key from the path
    (the admin's included), do not. The API is left to DRF: its parser refuses such bodies
    (core.parsers), its serializers such query parameters, and its URL converters and
    selectors such keys, in each endpoint's own words (core.converters).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith("/api/"):
            return self.get_response(request)
        if "\x00" in request.path_info:
            raise Http404("No such page.")
        fields = _names_with_nul(request.GET)
        if not fields and request.method == "POST":
            fields = _names_with_nul(request.POST)
        if not fields:
            return self.get_response(request)
        shown = [name.replace("\x00", "") for name in fields]
        return render(request, "bad_request.html", {"message": NUL_NOT_ALLOWED, "fields": shown}, status=400)


class NotFoundMiddleware:
    """Answer ``core.exceptions.NotFound`` from a page with the 404 page.

    Selectors raise NotFound for what is missing or not the user's (the same answer for
    both); page views just call them. The response is the one ``raise Http404`` gives
    (the handler404 page, templates/404.html; Django's debug page under DEBUG), htmx
    requests included. The API maps NotFound itself, in its own error body
    (core.exception_handlers), so /api/ paths are left alone.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, NotFound) or request.path_info.startswith("/api/"):
            return None
        return response_for_exception(request, Http404(exception.message))
