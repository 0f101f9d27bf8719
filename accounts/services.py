"""Accounts: registration, credential checks, API tokens and the auth rate limit."""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import math
import secrets
import time
from datetime import datetime
from typing import Literal

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

from .models import ApiToken, User, hash_token, normalize_email
from .signals import user_save_new

logger = logging.getLogger(__name__)

INVALID_CREDENTIALS = "Invalid email or password"
EMAIL_TAKEN = "This email address cannot be used to register. If it is yours, log in instead."
RATE_LIMITED = "Too many attempts. Wait a minute and try again."
BACKING_OFF = "Too many failed attempts for this account. Wait a little and try again."
RATE_LIMITER_UNAVAILABLE = "Signing in is briefly unavailable. Try again in a few seconds."
WRONG_CURRENT_PASSWORD = "Your current password is not correct."
TOKEN_INVALID = "Invalid token."
TOKEN_EXPIRED = "This API token has expired. Make a new one (POST /api/auth/token)."


class AuthenticationFailed(ApplicationError):
    code = "authentication_failed"
    status_code = 401


class TokenExpired(AuthenticationFailed):
    code = "token_expired"


class EmailTaken(Conflict):
    code = "email_taken"


def user_register(*, email: str, password: str, client_address: str, display_name: str = "") -> User:
    """Create an account and what every new user gets (user_created: its default
    project) together, or neither.

    Counted against the registrations of ``client_address`` first (RateLimited)."""
    auth_rate_limit_hit(action="register", client_address=client_address)
    email = normalize_email(email)
    user = User(email=email, display_name=display_name.strip())
    # Every field's problems at once: a person fixing the password should not then learn
    # that the email was taken all along.
    errors: dict[str, list[str]] = {}
    try:
        validate_password(password, user=user)
    except ValidationError as exc:
        errors["password"] = exc.messages
    try:
        user.full_clean(exclude=["password"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    taken = User.objects.filter(email=email).exists()
    if errors:
        if taken:
            errors.setdefault("email", []).append(EMAIL_TAKEN)
        raise ValidationError(errors)
    if taken:
        raise EmailTaken(EMAIL_TAKEN)
    user.set_password(password)
    try:
        user_save_new(user=user)
    except IntegrityError:
        # Two registrations raced past the check above; the constraint decided.
        raise EmailTaken(EMAIL_TAKEN) from None
    return user


def user_authenticate(*, request: HttpRequest | None, client_address: str, email: str, password: str) -> User:
    """Return the active user with these credentials; every failure reads the same.

    The one credential check of the login page, the login API and the token API: the
    attempt is counted first (RateLimited), a failure is recorded after."""
    auth_rate_limit_hit(action="login", client_address=client_address, email=email)
    user = authenticate(request, email=normalize_email(email), password=password)
    if not isinstance(user, User) or not user.is_active:
        auth_failure_record(client_address=client_address, email=email)
        raise AuthenticationFailed(INVALID_CREDENTIALS)
    return user


def user_password_change(
    *,
    user: User,
    client_address: str,
    current_password: str,
    new_password: str,
    keep_token: ApiToken | None = None,
) -> int:
    """Check the current password (a wrong one counts as a failed login), validate the
    new one, save it and revoke the user's API tokens except ``keep_token`` (the one
    the request came with, if any). Returns how many tokens were revoked.

    Other sessions end by themselves: each carries a hash of the old password. The
    caller keeps its own session with ``update_session_auth_hash``."""
    auth_rate_limit_hit(action="login", client_address=client_address, email=user.email)
    if not user.check_password(current_password):
        auth_failure_record(client_address=client_address, email=user.email)
        raise ValidationError({"current_password": [WRONG_CURRENT_PASSWORD]})
    try:
        validate_password(new_password, user=user)
    except ValidationError as exc:
        raise ValidationError({"new_password": exc.messages}) from None
    user.set_password(new_password)
    with transaction.atomic():
        user.save(update_fields=["password"])
        tokens = ApiToken.objects.filter(user=user)
        if keep_token is not None:
            tokens = tokens.exclude(pk=keep_token.pk)
        revoked, _ = tokens.delete()
    return revoked


def api_token_create(*, user: User, name: str = "") -> tuple[ApiToken, str]:
    """Make a token and return it with its raw value, which is not stored anywhere."""
    raw = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name.strip()[:100], digest=hash_token(raw), prefix=raw[:8])
    return token, raw


def api_token_authenticate(*, raw: str) -> ApiToken:
    """The token with this raw value, its user loaded; AuthenticationFailed when there is
    none (revoked, never made) or its user is inactive, TokenExpired past its TTL."""
    token = ApiToken.objects.select_related("user").filter(digest=hash_token(raw)).first()
    if token is None or not token.user.is_active:
        raise AuthenticationFailed(TOKEN_INVALID)
    if token.is_expired:
        raise TokenExpired(TOKEN_EXPIRED)
    now = timezone.now()
    # Recording use costs a write; once a minute is enough to see a token is alive.
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def api_token_revoke(*, token: ApiToken) -> None:
    """Revoke a token (fetched with selectors.api_token_get_for_user): it stops working
    at once."""
    token.delete()


# --- The sign-in throttle ------------------------------------------------------------
#
# Counters live in the cache. ``cache.add`` and ``cache.incr`` are atomic in Redis and in
# the local-memory cache, so concurrent attempts are all counted.
#
# - Every login attempt counts against its client address, and against its client
#   address and email together (fixed windows: RATE_LIMITED past the limit).
# - Failed logins also count against the email, wherever they came from. Past
#   AUTH_BACKOFF_AFTER_FAILURES of them, addresses that have failed themselves may try
#   that email once per 1, 2, 4, ... seconds (BACKING_OFF in between). Addresses that
#   have not failed are not held back: the owner, typing the right password elsewhere,
#   gets in however many guesses were made against the account.
# - Registrations count against their client address only.

# How long a let-through attempt holds the email's backoff gate against concurrent
# attempts (a credential check takes well under this).
_BACKOFF_CLAIM_SECONDS = 10


def _email_key(email: str) -> str:
    # Hashed: keys stay short and valid whatever a client sends as its email.
    return hashlib.sha256(normalize_email(email).encode()).hexdigest()[:32]


def _address_key(address: str) -> str:
    """IPv6 clients are counted per /64, the block one subscriber usually has."""
    ip = _parse_ip(address)
    if ip is None:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _window_hit(key: str, *, limit: int, window: int, now: float) -> int:
    """Count one attempt in a fixed window; the seconds until it ends once past the limit,
    else 0."""
    cache.add(f"{key}:start", now, timeout=window)
    cache.add(key, 0, timeout=window)
    try:
        count = cache.incr(key)
    except ValueError:
        # The window ended between add and incr: this is the first of a new one.
        cache.set(key, 1, timeout=window)
        count = 1
    if count <= limit:
        return 0
    started = cache.get(f"{key}:start", now)
    return min(max(math.ceil(started + window - now), 1), window)


def _backoff_wait(*, address_key: str, email_key: str, now: float) -> int:
    """Seconds an attempt on this email from this address must still wait, else 0 (and
    the attempt holds the gate)."""
    if cache.get(f"auth-fail:email:{email_key}", 0) < settings.AUTH_BACKOFF_AFTER_FAILURES:
        return 0
    if not cache.get(f"auth-fail:addr:{address_key}"):
        return 0
    opens_at = cache.get(f"auth-fail:email:{email_key}:gate", 0)
    if now < opens_at:
        return math.ceil(opens_at - now)
    # Only one of the attempts arriving once the gate opens is let through.
    if not cache.add(f"auth-fail:email:{email_key}:gate:{opens_at}", 1, timeout=_BACKOFF_CLAIM_SECONDS):
        return 1
    return 0


def auth_rate_limit_hit(
    *,
    action: Literal["login", "register"],
    client_address: str,
    email: str = "",
    now: float | None = None,
) -> None:
    """Count one login (page, API or token) or registration attempt; raise RateLimited
    when it must not go ahead, RateLimiterUnavailable when the cache cannot be reached."""
    now = time.time() if now is None else now
    window = settings.AUTH_RATE_LIMIT_WINDOW_SECONDS
    address_key = _address_key(client_address)
    try:
        if action == "register":
            wait = _window_hit(
                f"auth-rl:register:addr:{address_key}", limit=settings.AUTH_RATE_LIMIT_ATTEMPTS, window=window, now=now
            )
            if wait:
                raise RateLimited(RATE_LIMITED, retry_after=wait)
            return
        email_key = _email_key(email)
        wait = max(
            _window_hit(
                f"auth-rl:login:addr:{address_key}",
                limit=settings.AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS,
                window=window,
                now=now,
            ),
            _window_hit(
                f"auth-rl:login:addr-email:{address_key}:{email_key}",
                limit=settings.AUTH_RATE_LIMIT_ATTEMPTS,
                window=window,
                now=now,
            ),
        )
        if wait:
            raise RateLimited(RATE_LIMITED, retry_after=wait)
        wait = _backoff_wait(address_key=address_key, email_key=email_key, now=now)
    except RedisError as exc:
        logger.warning("Rate limiter unavailable (%s): refusing %s attempts for now", exc, action)
        raise RateLimiterUnavailable(RATE_LIMITER_UNAVAILABLE, retry_after=5) from None
    if wait:
        raise RateLimited(BACKING_OFF, retry_after=wait)


def auth_failure_record(*, client_address: str, email: str, now: float | None = None) -> None:
    """Remember a failed login: against the email (its backoff grows) and against the
    address (which is held back by the backoff of every email from now on)."""
    now = time.time() if now is None else now
    memory = settings.AUTH_FAILURE_MEMORY_SECONDS
    email_key = _email_key(email)
    count_key = f"auth-fail:email:{email_key}"
    try:
        cache.set(f"auth-fail:addr:{_address_key(client_address)}", 1, timeout=memory)
        cache.add(count_key, 0, timeout=memory)
        try:
            failures = cache.incr(count_key)
        except ValueError:
            cache.set(count_key, 1, timeout=memory)
            failures = 1
        cache.touch(count_key, timeout=memory)
        beyond = failures - settings.AUTH_BACKOFF_AFTER_FAILURES
        if beyond >= 0:
            delay = min(2 ** min(beyond, 30), settings.AUTH_BACKOFF_MAX_SECONDS)
            cache.set(f"{count_key}:gate", now + delay, timeout=memory)
    except RedisError as exc:
        logger.warning("Rate limiter unavailable (%s): a failed login was not recorded", exc)
        raise RateLimiterUnavailable(RATE_LIMITER_UNAVAILABLE, retry_after=5) from None


# --- Client addresses ------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _networks(spec: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def _parse_ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    value = value.strip()
    if value.startswith("[") and "]" in value:  # [2001:db8::1]:443
        value = value[1 : value.index("]")]
    elif value.count(":") == 1:  # 203.0.113.7:443
        value = value.split(":", 1)[0]
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:203.0.113.7 is 203.0.113.7
    return ip


def client_address(request: HttpRequest) -> str:
    """The address of the client that sent the request, for the sign-in throttle.

    REMOTE_ADDR (daphne's peer), unless that peer is one of settings.TRUSTED_PROXIES:
    then the right-most X-Forwarded-For entry that is not a trusted proxy. Each proxy
    appends the address it was connected from, so that entry was written by a proxy we
    trust; anything left of it may have been made up by the client. Without trusted
    proxies the header is never read."""
    peer = str(request.META.get("REMOTE_ADDR") or "")
    proxies = _networks(tuple(settings.TRUSTED_PROXIES))
    peer_ip = _parse_ip(peer)
    if not proxies or peer_ip is None or not any(peer_ip in network for network in proxies):
        return str(peer_ip) if peer_ip is not None else peer or "unknown"
    forwarded = str(request.META.get("HTTP_X_FORWARDED_FOR") or "")
    for hop in reversed(forwarded.split(",")):
        hop_ip = _parse_ip(hop)
        if hop_ip is None:
            # Not an address: the chain cannot be followed further than the proxy.
            break
        if not any(hop_ip in network for network in proxies):
            return str(hop_ip)
    return str(peer_ip)


def sessions_clear_expired(*, now: datetime | None = None) -> int:
    """Delete expired sessions; returns how many went."""
    deleted, _ = Session.objects.filter(expire_date__lt=now or timezone.now()).delete()
    return deleted
