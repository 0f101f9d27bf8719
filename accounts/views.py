"""Register, log in, log out, and the account pages (password, API tokens): HTML pages
over accounts.services."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login, logout, update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods, require_POST

from core.exceptions import RateLimited
from core.forms import add_service_errors

from .forms import LoginForm, PasswordChangeForm, RegisterForm, TokenCreateForm
from .selectors import api_token_get_for_user, api_token_list_for_user, request_user
from .services import (
    AuthenticationFailed,
    EmailTaken,
    api_token_create,
    api_token_revoke,
    client_address,
    user_authenticate,
    user_password_change,
    user_register,
)

# Only used to fill the form again on a refused attempt; nothing longer is a valid address.
EMAIL_MAX_LENGTH = 254

# Registration does not go through authenticate(), so login() must be told the backend.
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"

PASSWORD_CHANGED = "Your password was changed. Your other sessions are signed out."
TOKEN_REVOKED = "Token “{name}” revoked: it no longer works."


def _safe_next(request: HttpRequest) -> str | None:
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None


def _rate_limited(
    request: HttpRequest, template: str, form: LoginForm | RegisterForm, exc: RateLimited
) -> HttpResponse:
    response = render(
        request, template, {"form": form, "alert": exc.message, "next": _safe_next(request)}, status=exc.status_code
    )
    response["Retry-After"] = str(exc.retry_after)
    return response


@sensitive_post_parameters("password")
@never_cache
@require_http_methods(["GET", "POST"])
def login_view(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect(_safe_next(request) or "tasks:board")
    if request.method == "GET":
        return render(request, "accounts/login.html", {"form": LoginForm(), "next": _safe_next(request)})

    form = LoginForm(request.POST)
    if form.is_valid():
        try:
            user = user_authenticate(
                request=request,
                client_address=client_address(request),
                email=form.cleaned_data["email"],
                password=form.cleaned_data["password"],
            )
        except RateLimited as exc:
            email = request.POST.get("email", "")[:EMAIL_MAX_LENGTH]
            return _rate_limited(request, "accounts/login.html", LoginForm(initial={"email": email}), exc)
        except AuthenticationFailed as exc:
            form.add_error(None, exc.message)
        else:
            login(request, user)
            return redirect(_safe_next(request) or "tasks:board")
    return render(request, "accounts/login.html", {"form": form, "next": _safe_next(request)}, status=400)


@sensitive_post_parameters("password", "password_confirm")
@never_cache
@require_http_methods(["GET", "POST"])
def register(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("tasks:board")
    if request.method == "GET":
        return render(request, "accounts/register.html", {"form": RegisterForm()})

    form = RegisterForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            user = user_register(
                email=data["email"],
                password=data["password"],
                display_name=data["display_name"],
                client_address=client_address(request),
            )
        except RateLimited as exc:
            email = request.POST.get("email", "")[:EMAIL_MAX_LENGTH]
            return _rate_limited(request, "accounts/register.html", RegisterForm(initial={"email": email}), exc)
        except EmailTaken as exc:
            form.add_error("email", exc.message)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            login(request, user, backend=MODEL_BACKEND)
            messages.success(request, "Welcome to AutoCoder! Your first project is ready: add a task to get started.")
            return redirect("tasks:board")
    return render(request, "accounts/register.html", {"form": form}, status=400)


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    logout(request)
    messages.info(request, "You have been signed out.")
    return redirect("accounts:login")


@sensitive_post_parameters("current_password", "new_password", "new_password_confirm")
@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def password_change(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return render(request, "accounts/password.html", {"form": PasswordChangeForm()})
    form = PasswordChangeForm(request.POST)
    if form.is_valid():
        user = request_user(request)
        try:
            revoked = user_password_change(
                user=user,
                client_address=client_address(request),
                current_password=form.cleaned_data["current_password"],
                new_password=form.cleaned_data["new_password"],
            )
        except RateLimited as exc:
            response = render(
                request, "accounts/password.html", {"form": form, "alert": exc.message}, status=exc.status_code
            )
            response["Retry-After"] = str(exc.retry_after)
            return response
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            # This session stays signed in; the others carry the old password's hash.
            update_session_auth_hash(request, user)
            note = f" {revoked} API token{'s were' if revoked != 1 else ' was'} revoked." if revoked else ""
            messages.success(request, PASSWORD_CHANGED + note)
            return redirect("accounts:password")
    return render(request, "accounts/password.html", {"form": form}, status=400)


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    """The user's tokens; a POST makes one, whose raw value this answer shows once."""
    user = request_user(request)
    form = TokenCreateForm(request.POST if request.method == "POST" else None)
    context: dict[str, object] = {"form": form}
    status = 200
    if request.method == "POST":
        if form.is_valid():
            token, raw = api_token_create(user=user, name=form.cleaned_data["name"])
            context.update(new_token=token, new_token_raw=raw, form=TokenCreateForm())
        else:
            status = 400
    context.update(tokens=api_token_list_for_user(user=user), ttl_days=settings.API_TOKEN_TTL_DAYS)
    return render(request, "accounts/tokens.html", context, status=status)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = api_token_get_for_user(user=request_user(request), token_id=token_id)
    api_token_revoke(token=token)
    messages.success(request, TOKEN_REVOKED.format(name=token.name or f"{token.prefix}…"))
    return redirect("accounts:tokens")
