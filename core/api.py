"""What every app's REST API shares: strict input fields, a JSON parser that survives
nesting bombs, the base view, and the error body as the OpenAPI schema describes it.

The error body itself is built in core.exception_handlers; ErrorSerializer only
documents it.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.views import APIView

from .parsers import SafeJSONParser, text_problem

NOT_A_STRING = "Not a valid string."
NOT_A_BOOLEAN = "Must be true or false."


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text."""

    default_error_messages = {"invalid": NOT_A_STRING}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON true/false only: no "yes", 1 or "on"."""

    default_error_messages = {"invalid": NOT_A_BOOLEAN}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictJSONField(serializers.JSONField):
    """A JSONField whose strings and keys can be stored: the checks DRF's CharField makes
    (no NUL, no lone surrogates), made over the whole document, as a 400 not a 500."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if problem := text_problem(value):
            raise serializers.ValidationError(problem)
        return value


class StrictEmailField(serializers.EmailField):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


# Base of every API view: JSON in and out. (A comment, not a docstring:
# drf-spectacular would show a docstring as every endpoint's description.)
class ApiView(APIView):
    parser_classes = [SafeJSONParser]


class ErrorSerializer(serializers.Serializer):
    """The one error shape (core.exception_handlers); documentation only."""

    message = serializers.CharField(help_text="What went wrong, for a person.")
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. `invalid`, `not_found`.")
    extra = serializers.DictField(
        help_text="Details: field errors under `fields` (field name → list of messages), "
        "`allowed` for refused moves, `retry_after` for rate limits."
    )


ERROR_DESCRIPTIONS = {
    400: "Invalid input: field errors are in `extra.fields`.",
    401: "Not authenticated.",
    403: "Forbidden (e.g. a session request without a CSRF token).",
    404: "Not found, or not yours.",
    409: "Conflict.",
    429: "Too many attempts: retry after the number of seconds in the Retry-After header.",
}


def error_responses(*statuses: int, descriptions: Mapping[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """OpenAPI responses for the given error statuses, all with the error body."""
    texts = {**ERROR_DESCRIPTIONS, **(descriptions or {})}
    return {
        status: OpenApiResponse(response=ErrorSerializer, description=texts.get(status) or HTTPStatus(status).phrase)
        for status in statuses
    }
