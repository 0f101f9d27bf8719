"""The application error type and its domain subclasses.

Services raise these; core.exception_handlers turns them into API responses.
"""

from __future__ import annotations

from typing import Any

from rest_framework import status


class ApplicationError(Exception):
    """A failure the user can act on. Subclasses fix ``code`` and ``status_code``."""

    code = "error"
    status_code: int = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}


class NotFound(ApplicationError):
    code = "not_found"
    status_code = status.HTTP_404_NOT_FOUND


class Conflict(ApplicationError):
    code = "conflict"
    status_code = status.HTTP_409_CONFLICT


class InvalidTransition(ApplicationError):
    code = "invalid_transition"


class RateLimited(ApplicationError):
    code = "rate_limited"
    status_code: int = status.HTTP_429_TOO_MANY_REQUESTS

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, extra={"retry_after": retry_after})
        self.retry_after = retry_after


class RateLimiterUnavailable(RateLimited):
    """The rate limiter's store (the cache) cannot be reached: attempts are refused,
    not let through uncounted, with a message that says it is temporary."""

    code = "rate_limiter_unavailable"
    status_code: int = status.HTTP_503_SERVICE_UNAVAILABLE


class SandboxUnavailable(ApplicationError):
    """No sandbox can be made here; the command was not started."""

    code = "sandbox_unavailable"
