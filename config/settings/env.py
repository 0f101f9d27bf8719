"""Reading the environment strictly: a bad value stops start-up with a clear message.

django-environ does the parsing; the helpers here refuse what it would silently
accept (``DEBUG=maybe`` read as False, ``DATABASE_URL=foo://`` read as an unknown
engine) so that a typo never turns into a surprise at first use.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
_dotenv = BASE_DIR / ".env"
if _dotenv.is_file():
    environ.Env.read_env(str(_dotenv))

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

SUPPORTED_DATABASE_ENGINES = {
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.postgresql": "postgres",
}


def _fail(name: str, value: str, expected: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(
        f"Environment variable {name}={value!r} is invalid: expected {expected}. See .env.example."
    )


def env_str(name: str, default: str) -> str:
    """A set-but-empty variable (``FOO=`` as in .env.example) counts as unset."""
    raw = env.str(name, default="").strip()
    return raw or default


def env_bool(name: str, default: bool) -> bool:
    raw = env_str(name, "")
    if not raw:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _fail(name, raw, "true or false")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = env_str(name, "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _fail(name, raw, "a whole number") from None
    if value < minimum:
        raise _fail(name, raw, f"a whole number >= {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float, maximum: float) -> float:
    raw = env_str(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise _fail(name, raw, "a number") from None
    if not minimum <= value <= maximum:  # also refuses nan
        raise _fail(name, raw, f"a number from {minimum} to {maximum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name, "")
    if not raw:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_ip_networks(name: str) -> list[str]:
    """Comma-separated IP addresses or CIDR networks (``10.0.0.1,172.16.0.0/12``),
    returned in canonical form (``10.0.0.1/32``); empty by default."""
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise _fail(name, item, "comma-separated IP addresses or networks, e.g. 10.0.0.1,172.16.0.0/12") from None
    return networks


def env_float_list(name: str, default: list[float]) -> list[float]:
    """Comma-separated non-negative numbers, e.g. ``2,4,8``."""
    items = env_list(name, [])
    if not items:
        return default
    try:
        values = [float(item) for item in items]
    except ValueError:
        raise _fail(name, ",".join(items), "comma-separated seconds, e.g. 2,4,8") from None
    if any(value < 0 or value != value for value in values):
        raise _fail(name, ",".join(items), "comma-separated seconds, e.g. 2,4,8") from None
    return values


def env_database(name: str, default: str) -> dict[str, Any]:
    raw = env_str(name, default)
    config = environ.Env.db_url_config(raw) if "://" in raw else {}
    if config.get("ENGINE") not in SUPPORTED_DATABASE_ENGINES:
        raise _fail(name, raw, "postgres://user@host:5432/name or sqlite:///path/to/file.sqlite3")
    if not config.get("NAME"):
        raise _fail(name, raw, "a URL that names the database")
    return config


def env_redis_url(name: str) -> str | None:
    raw = env_str(name, "")
    if not raw:
        return None
    parsed = urlparse(raw)
    if parsed.scheme not in {"redis", "rediss"} or not parsed.hostname:
        raise _fail(name, raw, "redis://host:6379/0 (or leave it unset for the embedded mode)")
    return raw
