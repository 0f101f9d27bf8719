from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


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
