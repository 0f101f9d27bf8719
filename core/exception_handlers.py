"""The one place that turns errors into API responses.

Every error body has the same shape: ``{"message": str, "code": str, "extra": dict}``.
Field errors from validation are under ``extra["fields"]``.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler

from .exceptions import ApplicationError, RateLimited

logger = logging.getLogger(__name__)


def error_body(message: str, code: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"message": message, "code": code, "extra": extra or {}}


def _validation_body(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return error_body("Invalid input.", "invalid", {"fields": detail})
    if isinstance(detail, list) and detail:
        return error_body(" ".join(str(item) for item in detail), "invalid")
    return error_body(str(detail), "invalid")


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        response = Response(error_body(exc.message, exc.code, exc.extra), status=exc.status_code)
        if isinstance(exc, RateLimited):
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(as_serializer_error(exc))
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, SuspiciousOperation):
        # e.g. RequestDataTooBig: the body is refused, not a server error.
        logger.warning("Refused request: %s", exc)
        exc = exceptions.ParseError(str(exc) or "Bad request.")

    handled = exception_handler(exc, context)
    if handled is None:
        return None
    response = handled
    if isinstance(exc, exceptions.ValidationError):
        response.data = _validation_body(exc.detail)
    elif isinstance(exc, exceptions.APIException):
        detail = exc.detail
        message = str(detail) if not isinstance(detail, (dict, list)) else "Request failed."
        code = detail.code if isinstance(detail, exceptions.ErrorDetail) and detail.code else exc.default_code
        response.data = error_body(message, str(code))
    return response
