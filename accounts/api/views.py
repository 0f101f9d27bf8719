"""Registration, login, logout and API tokens.

Login, registration and token requests carry no authentication (so a script can log
in without a CSRF token; cross-site forms cannot send JSON, the only body accepted)
and are rate limited per client address and per email.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth import login, logout
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.fields import empty
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from accounts.services import (
    api_token_create,
    auth_rate_limit_hit,
    client_address,
    user_authenticate,
    user_register,
)
from core.api import ApiView, StrictCharField, error_responses

from . import schema  # noqa: F401 - registers the token scheme with drf-spectacular
from .serializers import (
    EMAIL_MAX_LENGTH,
    LoginSerializer,
    RegisterSerializer,
    TokenCreateSerializer,
    TokenSerializer,
    UserSerializer,
)

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"

RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    int,
    OpenApiParameter.HEADER,
    response=[429],
    description="Seconds to wait before the next attempt.",
)
CREDENTIALS_FAILED = {401: 'Wrong credentials: always "Invalid email or password".'}


def _count_attempt(request: Request, *, action: str) -> None:
    """Count an attempt against the rate limit as soon as the body names an email.

    Bodies without a usable email are refused by validation and not counted. The email
    is checked first because it becomes part of a cache key (no NULs, no lone
    surrogates, bounded length).
    """
    data = request.data
    if not isinstance(data, dict):
        return
    try:
        email = StrictCharField(max_length=EMAIL_MAX_LENGTH).run_validation(data.get("email", empty))
    except ValidationError:
        return
    auth_rate_limit_hit(action=action, client_address=client_address(request._request), email=email)


class AnonymousApiView(ApiView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]


class RegisterApi(AnonymousApiView):
    @extend_schema(
        operation_id="auth_register",
        summary="Create an account and log the session in",
        request=RegisterSerializer,
        responses={
            201: UserSerializer,
            **error_responses(400, 409, 429, descriptions={409: "The email is taken (code `email_taken`)."}),
        },
        parameters=[RETRY_AFTER],
    )
    def post(self, request: Request) -> Response:
        _count_attempt(request, action="register")
        serializer = RegisterSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = user_register(**serializer.validated_data)
        login(request._request, user, backend=MODEL_BACKEND)
        return Response(UserSerializer(user).data, status=status.HTTP_201_CREATED)


class LoginApi(AnonymousApiView):
    @extend_schema(
        operation_id="auth_login",
        summary="Log the session in",
        request=LoginSerializer,
        responses={200: UserSerializer, **error_responses(400, 401, 429, descriptions=CREDENTIALS_FAILED)},
        parameters=[RETRY_AFTER],
    )
    def post(self, request: Request) -> Response:
        _count_attempt(request, action="login")
        serializer = LoginSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = user_authenticate(request=request._request, **serializer.validated_data)
        login(request._request, user)
        return Response(UserSerializer(user).data)


class TokenCreateApi(AnonymousApiView):
    @extend_schema(
        operation_id="auth_token_create",
        summary="Make an API token",
        description="The raw token is in this response only; the server keeps its digest.",
        request=TokenCreateSerializer,
        responses={201: TokenSerializer, **error_responses(400, 401, 429, descriptions=CREDENTIALS_FAILED)},
        parameters=[RETRY_AFTER],
    )
    def post(self, request: Request) -> Response:
        _count_attempt(request, action="token")
        serializer = TokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user = user_authenticate(request=request._request, email=data["email"], password=data["password"])
        _, raw = api_token_create(user=user, name=data["name"])
        return Response(TokenSerializer({"token": raw}).data, status=status.HTTP_201_CREATED)


class LogoutApi(ApiView):
    @extend_schema(
        operation_id="auth_logout",
        summary="End the session",
        description="Ends the session. API tokens stay valid.",
        request=None,
        responses={204: OpenApiResponse(description="Logged out."), **error_responses(401, 403)},
    )
    def post(self, request: Request) -> Response:
        logout(request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeApi(ApiView):
    @extend_schema(
        operation_id="auth_me",
        summary="The authenticated user",
        responses={200: UserSerializer, **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(UserSerializer(cast(User, request.user)).data)
