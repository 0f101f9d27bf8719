"""Accounts: registration, credential checks, API tokens and the auth rate limit."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from datetime import datetime

from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.password_validation import validate_password
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from redis.exceptions import RedisError

from core.exceptions import ApplicationError, Conflict, RateLimited, RateLimiterUnavailable
from projects.services import project_create_default

from .models import ApiToken, User, hash_token, normalize_email

logger = logging.getLogger(__name__)

INVALID_CREDENTIALS = "Invalid email or password"
EMAIL_TAKEN = "This email address cannot be used to register. If it is yours, log in instead."
RATE_LIMITED = "Too many attempts. Wait a minute and try again."


class AuthenticationFailed(ApplicationError):
    code = "authentication_failed"
    status_code = 401


class EmailTaken(Conflict):
    code = "email_taken"


def user_register(*, email: str, password: str, display_name: str = "") -> User:
    """Create an account and its default project together, or neither."""
    email = normalize_email(email)
    user = User(email=email, display_name=display_name.strip())
    try:
        validate_password(password, user=user)
    except ValidationError as exc:
        raise ValidationError({"password": exc.messages}) from None
    user.set_password(password)
    user.full_clean(exclude=["password"], validate_unique=False, validate_constraints=False)
    if User.objects.filter(email=email).exists():
        raise EmailTaken(EMAIL_TAKEN)
    try:
        with transaction.atomic():
            user.save()
            project_create_default(owner=user)
    except IntegrityError:
        # Two registrations raced past the check above; the constraint decided.
        raise EmailTaken(EMAIL_TAKEN) from None
    return user


def user_authenticate(*, request: HttpRequest | None, email: str, password: str) -> User:
    """Return the active user with these credentials; every failure reads the same."""
    user = authenticate(request, email=normalize_email(email), password=password)
    if not isinstance(user, User) or not user.is_active:
        raise AuthenticationFailed(INVALID_CREDENTIALS)
    return user


def api_token_create(*, user: User, name: str = "") -> tuple[ApiToken, str]:
    """Make a token and return it with its raw value, which is not stored anywhere."""
    raw = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name.strip()[:100], digest=hash_token(raw), prefix=raw[:8])
    return token, raw


def api_token_authenticate(*, raw: str) -> User | None:
    token = ApiToken.objects.select_related("user").filter(digest=hash_token(raw)).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    # Recording use costs a write; once a minute is enough to see a token is alive.
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user


RATE_LIMITER_UNAVAILABLE = "Signing in is briefly unavailable. Try again in a few seconds."


def auth_rate_limit_hit(*, action: str, client_address: str, email: str) -> None:
    """Count one login or registration attempt; raise RateLimited past the limit.

    Counted per client address and per email, each in a window that starts at its
    first attempt. ``cache.add`` and ``cache.incr`` are atomic in Redis and in the
    local-memory cache, so concurrent attempts are all counted.
    """
    limit = settings.AUTH_RATE_LIMIT_ATTEMPTS
    window = settings.AUTH_RATE_LIMIT_WINDOW_SECONDS
    now = time.time()
    # Hashed: keys stay short and valid whatever a client sends as its email.
    email_key = hashlib.sha256(normalize_email(email).encode()).hexdigest()[:32]
    keys = [f"auth-rl:{action}:addr:{client_address[:64]}", f"auth-rl:{action}:email:{email_key}"]
    retry_after = 0
    try:
        for key in keys:
            cache.add(f"{key}:start", now, timeout=window)
            cache.add(key, 0, timeout=window)
            try:
                count = cache.incr(key)
            except ValueError:
                # The window ended between add and incr: this is the first of a new one.
                cache.set(key, 1, timeout=window)
                count = 1
            if count > limit:
                started = cache.get(f"{key}:start", now)
                retry_after = max(retry_after, int(started + window - now) + 1)
    except RedisError as exc:
        logger.warning("Rate limiter unavailable (%s): refusing %s attempts for now", exc, action)
        raise RateLimiterUnavailable(RATE_LIMITER_UNAVAILABLE, retry_after=5) from None
    if retry_after:
        raise RateLimited(RATE_LIMITED, retry_after=min(retry_after, window))


def client_address(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def sessions_clear_expired(*, now: datetime | None = None) -> int:
    """Delete expired sessions; returns how many went."""
    deleted, _ = Session.objects.filter(expire_date__lt=now or timezone.now()).delete()
    return deleted
