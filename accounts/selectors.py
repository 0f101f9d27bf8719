from __future__ import annotations

from typing import Any

from .models import User


def request_user(request: Any) -> User:
    """The logged-in user of a request (Django's or DRF's) whose view already required
    a login (login_required, or the API's default IsAuthenticated permission)."""
    user = request.user
    if not isinstance(user, User):
        raise TypeError("request_user() needs a view that requires a logged-in user")
    return user
