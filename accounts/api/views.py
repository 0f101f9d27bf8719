"""Registration, login, logout, password change and API tokens.

Login, registration and token requests carry no authentication (so a script can log
in without a CSRF token; cross-site forms cannot send JSON, the only body accepted).
They go through the sign-in throttle of accounts.services, shared with the login page.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import login, logout, update_session_auth_hash
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import ApiToken
from accounts.selectors import api_token_get_for_user, api_token_list_for_user, request_user
from accounts.services import (
    api_token_create,
    api_token_revoke,
    client_address,
    user_authenticate,
    user_password_change,
    user_register,
)
from core.api import ApiView, error_responses

from . import schema  # noqa: F401 - registers the token scheme with drf-spectacular
from .serializers import (
    ApiTokenSerializer,
    LoginSerializer,
    PasswordChangeSerializer,
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
TOKEN_ID = OpenApiParameter("token_id", int, OpenApiParameter.PATH, description="The token's id.")
CREDENTIALS_FAILED = {401: 'Wrong credentials: always "Invalid email or password".'}
THROTTLED = {
    429: "Too many attempts from this address (code `rate_limited`), or this account has failed "
    "logins and this address has failed too: wait the Retry-After seconds."
}


class AnonymousApiView(ApiView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]


class RegisterApi(AnonymousApiView):
    @extend_schema(
        operation_id="auth_register",
        summary="Create an account and log the session in",
        description="Passwords are checked like on the page: at least 8 characters other than spaces, "
        "not common, not all digits, not like the email. Registrations are limited per client address.",
        request=RegisterSerializer,
        responses={
            201: UserSerializer,
            **error_responses(400, 409, 429, descriptions={409: "The email is taken (code `email_taken`)."}),
        },
        parameters=[RETRY_AFTER],
    )
    def post(self, request: Request) -> Response:
        serializer = RegisterSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = user_register(**serializer.validated_data, client_address=client_address(request._request))
        login(request._request, user, backend=MODEL_BACKEND)
        return Response(UserSerializer(user).data, status=status.HTTP_201_CREATED)


class LoginApi(AnonymousApiView):
    @extend_schema(
        operation_id="auth_login",
        summary="Log the session in",
        request=LoginSerializer,
        responses={
            200: UserSerializer,
            **error_responses(400, 401, 429, descriptions={**CREDENTIALS_FAILED, **THROTTLED}),
        },
        parameters=[RETRY_AFTER],
    )
    def post(self, request: Request) -> Response:
        serializer = LoginSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = user_authenticate(
            request=request._request, client_address=client_address(request._request), **serializer.validated_data
        )
        login(request._request, user)
        return Response(UserSerializer(user).data)


class TokenCreateApi(AnonymousApiView):
    @extend_schema(
        operation_id="auth_token_create",
        summary="Make an API token",
        description="The raw token is in this response only; the server keeps its digest. "
        "Counted like a login (the same throttle as POST /api/auth/login and the login page).",
        request=TokenCreateSerializer,
        responses={
            201: TokenSerializer,
            **error_responses(400, 401, 429, descriptions={**CREDENTIALS_FAILED, **THROTTLED}),
        },
        parameters=[RETRY_AFTER],
    )
    def post(self, request: Request) -> Response:
        serializer = TokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user = user_authenticate(
            request=request._request,
            client_address=client_address(request._request),
            email=data["email"],
            password=data["password"],
        )
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
        return Response(UserSerializer(request_user(request)).data)


def _current_token(request: Request) -> ApiToken | None:
    return request.auth if isinstance(request.auth, ApiToken) else None


class PasswordChangeApi(ApiView):
    @extend_schema(
        operation_id="auth_password_change",
        summary="Change your password",
        description="Needs the current password (a wrong one counts as a failed login). Other sessions "
        "end; every API token is revoked except the one this request is made with. A session making the "
        "request stays logged in.",
        request=PasswordChangeSerializer,
        responses={
            204: OpenApiResponse(description="Changed."),
            **error_responses(
                400,
                401,
                403,
                429,
                descriptions={400: "Wrong current password, or a weak new one: see `extra.fields`.", **THROTTLED},
            ),
        },
        parameters=[RETRY_AFTER],
    )
    def post(self, request: Request) -> Response:
        serializer = PasswordChangeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = request_user(request)
        user_password_change(
            user=user,
            client_address=client_address(request._request),
            keep_token=_current_token(request),
            **serializer.validated_data,
        )
        if isinstance(request.successful_authenticator, SessionAuthentication):
            update_session_auth_hash(request._request, user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenListApi(ApiView):
    @extend_schema(
        operation_id="auth_tokens_list",
        summary="List your API tokens",
        description="Newest first. Raw tokens are never shown again: `prefix` tells them apart.",
        responses={200: ApiTokenSerializer(many=True), **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        tokens = api_token_list_for_user(user=request_user(request))
        return Response(ApiTokenSerializer(tokens, many=True, context={"current_token": _current_token(request)}).data)


class TokenDetailApi(ApiView):
    @extend_schema(
        operation_id="auth_tokens_destroy",
        summary="Revoke an API token",
        description="The token stops working at once (401). Revoking the token the request is made with is allowed.",
        parameters=[TOKEN_ID],
        responses={204: OpenApiResponse(description="Revoked."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, token_id: str) -> Response:
        token = api_token_get_for_user(user=request_user(request), token_id=token_id)
        api_token_revoke(token=token)
        return Response(status=status.HTTP_204_NO_CONTENT)
