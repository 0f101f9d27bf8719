"""Accounts, sign-in throttling, cookies and the security headers."""

from __future__ import annotations

from ..env import env_bool, env_int, env_ip_networks, env_str
from .core import DEBUG

# --- Accounts and security ----------------------------------------------------------

AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "tasks:board"
LOGOUT_REDIRECT_URL = "accounts:login"

PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {
        "NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator",
        "OPTIONS": {"user_attributes": ("email", "display_name")},
    },
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 8},
    },
    # Eight spaces are eight characters: this one counts only the others.
    {
        "NAME": "accounts.password_validation.MinimumNonSpaceLengthValidator",
        "OPTIONS": {"min_length": 8},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# The sign-in throttle (accounts.services.auth_rate_limit_hit). In each window: login
# attempts per client address and email, and registrations per client address ...
AUTH_RATE_LIMIT_ATTEMPTS = env_int("AUTH_RATE_LIMIT_ATTEMPTS", default=10, minimum=1)
# ... and login attempts per client address, whatever the email.
AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS = env_int("AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS", default=20, minimum=1)
AUTH_RATE_LIMIT_WINDOW_SECONDS = env_int("AUTH_RATE_LIMIT_WINDOW_SECONDS", default=60, minimum=1)
# After this many failed logins for one email, the next attempt from an address that has
# failed itself must wait 1, 2, 4, ... seconds after the last failure, at most
# AUTH_BACKOFF_MAX_SECONDS. Addresses that have not failed are not slowed down, so
# someone else's guessing never locks the owner out.
AUTH_BACKOFF_AFTER_FAILURES = env_int("AUTH_BACKOFF_AFTER_FAILURES", default=5, minimum=1)
AUTH_BACKOFF_MAX_SECONDS = env_int("AUTH_BACKOFF_MAX_SECONDS", default=900, minimum=1)
# Failures are forgotten this long after the last one.
AUTH_FAILURE_MEMORY_SECONDS = env_int("AUTH_FAILURE_MEMORY_SECONDS", default=3600, minimum=60)

# Reverse proxies in front of daphne (IP addresses or CIDR networks). X-Forwarded-For is
# believed only from these (accounts.services.client_address); empty = nobody's.
TRUSTED_PROXIES = env_ip_networks("TRUSTED_PROXIES")

# API tokens stop working this many days after they are made (0 = never).
API_TOKEN_TTL_DAYS = env_int("API_TOKEN_TTL_DAYS", default=0)

SESSION_ENGINE = "core.sessions"  # database sessions; a key with a NUL names none
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=not DEBUG)
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", default=14 * 24 * 3600, minimum=60)
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if env_bool("SECURE_PROXY_SSL", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Secure cookies mean the site is served over HTTPS: plain-HTTP requests are redirected
# there, except the health check (probes speak HTTP to the container).
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=SESSION_COOKIE_SECURE)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
# Strict-Transport-Security on HTTPS responses: a year by default outside DEBUG.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=True)
# Sent on every response (core.middleware.ContentSecurityPolicyMiddleware). Pages load
# scripts and styles from static files only: no inline <script>, <style>, style="" or
# on*="" handlers in templates. With DEBUG on it is only reported (Django's debug pages
# are inline), unless CONTENT_SECURITY_POLICY_REPORT_ONLY says otherwise.
CONTENT_SECURITY_POLICY = env_str(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
)
CONTENT_SECURITY_POLICY_REPORT_ONLY = env_bool("CONTENT_SECURITY_POLICY_REPORT_ONLY", default=DEBUG)

# Bodies larger than this are refused with a 400 before any parsing.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=2 * 1024 * 1024)
