"""The operator's login, as far as one Claude CLI call needs it, and the API it talks to.

The call's private ``CLAUDE_CONFIG_DIR`` gets ``settings.json`` and the account part of
``.claude.json`` as files; the OAuth access token (``CLAUDE_CODE_OAUTH_TOKEN``, not the
refresh token: the CLI cannot refresh, nor rotate the operator's login) and an API key
kept in ``.claude.json`` (``ANTHROPIC_API_KEY``) go only into the CLI's environment
(llm/providers/claude_cli_sandbox.py).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from .base import ProviderError

DEFAULT_API = "https://api.anthropic.com"
ACCOUNT_KEYS = ("oauthAccount", "userID", "hasCompletedOnboarding")
# The key the server is configured with (settings.ANTHROPIC_API_KEY), handed over in the
# environment the provider builds; it wins over a key in the operator's login files.
API_KEY_VARIABLE = "ANTHROPIC_API_KEY"
SETTINGS_LOGIN_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
LOGIN_EXPIRED = (
    "Error: the Claude CLI's login on this server ran out at {when} and each call gets only its access "
    "token, not the refresh token. Run `claude` once as the server's user to renew it, or give the server "
    "a long-lived token (`claude setup-token`) as CLAUDE_CODE_OAUTH_TOKEN."
)


def login_environment(env: dict[str, str], config: Path) -> dict[str, str]:
    """Fill ``config`` (the call's CLAUDE_CONFIG_DIR) and return the variables that carry
    the login into the CLI's environment. No token or key is written into ``config``.

    Raises ProviderError where the only login is an access token that has run out (the
    CLI, without the refresh token, could not renew it)."""
    source = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else Path(env.get("HOME", "~"), ".claude")
    account = source / ".claude.json" if env.get("CLAUDE_CONFIG_DIR") else Path(env.get("HOME", "~"), ".claude.json")
    with contextlib.suppress(OSError):
        shutil.copyfile(source / "settings.json", config / "settings.json")
    login: dict[str, str] = {}
    expired_at: float | None = None
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        oauth = json.loads((source / ".credentials.json").read_text()).get("claudeAiOauth") or {}
        expires = oauth.get("expiresAt")  # milliseconds since the epoch
        if isinstance(expires, int | float) and expires / 1000 < time.time():
            expired_at = expires / 1000
        elif oauth.get("accessToken"):
            login["CLAUDE_CODE_OAUTH_TOKEN"] = str(oauth["accessToken"])
    kept: dict[str, object] = {"hasCompletedOnboarding": True}
    with contextlib.suppress(OSError, ValueError):
        state = json.loads(account.read_text())
        if isinstance(state, dict):
            kept.update({key: state[key] for key in ACCOUNT_KEYS if key in state})
            if state.get("primaryApiKey"):
                login["ANTHROPIC_API_KEY"] = str(state["primaryApiKey"])
    (config / ".claude.json").write_text(json.dumps(kept))
    # A token the operator gave the server itself wins over the login's files.
    login.update({k: v for k, v in env.items() if k in ("CLAUDE_CODE_OAUTH_TOKEN", API_KEY_VARIABLE)})
    if expired_at is not None and not login and not _settings_login(config):
        when = datetime.fromtimestamp(expired_at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
        raise ProviderError(LOGIN_EXPIRED.format(when=when), retryable=False)
    return login


def _settings_login(config: Path) -> bool:
    """Whether the operator's settings.json gives the CLI a key of its own."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        settings = json.loads((config / "settings.json").read_text())
        variables = settings.get("env") or {}
        return bool(settings.get("apiKeyHelper") or any(variables.get(name) for name in SETTINGS_LOGIN_VARIABLES))
    return False


def api_address(env: dict[str, str], config: Path) -> tuple[str, str, int]:
    """(scheme, host, port) of the API the CLI talks to: ANTHROPIC_BASE_URL from the
    operator's settings.json (the CLI applies its ``env`` over its own environment), else
    from its environment, else Anthropic's."""
    url = ""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        url = str(json.loads((config / "settings.json").read_text()).get("env", {}).get("ANTHROPIC_BASE_URL") or "")
    parts = urlsplit(url or env.get("ANTHROPIC_BASE_URL") or DEFAULT_API)
    scheme = parts.scheme or "https"
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)
