from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from core.selectors import one_or_not_found

from .models import ApiToken, User

TOKEN_NOT_FOUND = "API token not found."


def request_user(request: Any) -> User:
    """The logged-in user of a request (Django's or DRF's) whose view already required
    a login (login_required, or the API's default IsAuthenticated permission)."""
    user = request.user
    if not isinstance(user, User):
        raise TypeError("request_user() needs a view that requires a logged-in user")
    return user


def api_token_list_for_user(*, user: User) -> QuerySet[ApiToken]:
    """The user's tokens, newest first."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def api_token_get_for_user(*, user: User, token_id: object) -> ApiToken:
    """The user's token, or NotFound — also when it exists but is someone else's."""
    return one_or_not_found(ApiToken.objects.filter(user=user), token_id, TOKEN_NOT_FOUND)
