"""Register, log in, log out: HTML pages over accounts.services."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login, logout
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods, require_POST

from core.exceptions import RateLimited
from core.forms import add_service_errors

from .forms import LoginForm, RegisterForm
from .services import (
    AuthenticationFailed,
    EmailTaken,
    auth_rate_limit_hit,
    client_address,
    user_authenticate,
    user_register,
)

# The rate limit keys on the email as typed; nothing longer is a valid address.
EMAIL_MAX_LENGTH = 254

# Registration does not go through authenticate(), so login() must be told the backend.
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


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
    response = render(request, template, {"form": form, "alert": exc.message, "next": _safe_next(request)}, status=429)
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

    email = request.POST.get("email", "")[:EMAIL_MAX_LENGTH]
    form = LoginForm(request.POST)
    try:
        # Counted before the credentials are looked at, so guessing costs attempts.
        auth_rate_limit_hit(action="login", client_address=client_address(request), email=email)
    except RateLimited as exc:
        return _rate_limited(request, "accounts/login.html", LoginForm(initial={"email": email}), exc)
    if form.is_valid():
        try:
            user = user_authenticate(
                request=request, email=form.cleaned_data["email"], password=form.cleaned_data["password"]
            )
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

    email = request.POST.get("email", "")[:EMAIL_MAX_LENGTH]
    form = RegisterForm(request.POST)
    try:
        auth_rate_limit_hit(action="register", client_address=client_address(request), email=email)
    except RateLimited as exc:
        return _rate_limited(request, "accounts/register.html", RegisterForm(initial={"email": email}), exc)
    if form.is_valid():
        data = form.cleaned_data
        try:
            user = user_register(email=data["email"], password=data["password"], display_name=data["display_name"])
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
