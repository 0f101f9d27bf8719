"""Whose reviews on a pull request may send its run back to the Coder: a comment there is
untrusted input to an agent. The repository says (``forge_trusted_commenters``): people
the forge gives write access (asked of the forge, the answer kept briefly), or only the
logins it lists."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError

from ..forges import ForgeClient
from ..forges.reviews import commenter_may_write
from ..models import ForgeTrust, Repository

TRUST_UNKNOWN = "Choose collaborators or list."
LOGINS_BAD = "Give forge logins separated by commas (letters, digits, - _ . and [bot])."
LOGINS_REQUIRED = "List the logins to trust, or trust the collaborators."
LOGINS_MAX_CHARS = 2_000
_LOGIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}(\[bot\])?$")


def forge_trust_clean(*, forge_trusted_commenters: str, forge_trusted_logins: str) -> dict[str, Any]:
    """The two settings, checked: the fields to save, or ValidationError by field. The
    logins are kept normalised (one comma and a space between them)."""
    errors: dict[str, list[str]] = {}
    if forge_trusted_commenters and forge_trusted_commenters not in ForgeTrust.values:
        errors["forge_trusted_commenters"] = [TRUST_UNKNOWN]
    logins = [login.strip() for login in forge_trusted_logins.split(",") if login.strip()]
    if len(forge_trusted_logins) > LOGINS_MAX_CHARS or not all(_LOGIN.match(login) for login in logins):
        errors["forge_trusted_logins"] = [LOGINS_BAD]
    elif forge_trusted_commenters == ForgeTrust.LIST and not logins:
        errors["forge_trusted_logins"] = [LOGINS_REQUIRED]
    if errors:
        raise ValidationError(errors)
    return {"forge_trusted_commenters": forge_trusted_commenters, "forge_trusted_logins": ", ".join(logins)}


def forge_commenter_trusted(*, repository: Repository, client: ForgeClient, login: str, user_id: str = "") -> bool:
    """Whether ``login``'s reviews may become a round on ``repository``'s runs. Asking the
    forge may fail (ForgeError, retryable): the caller tries again later."""
    if not login:
        return False
    if repository.forge_trust == ForgeTrust.LIST:
        return login.lower() in repository.forge_trusted_login_set
    key = f"forge-trust:{repository.pk}:{repository.forge_kind}:{login.lower()}:{user_id}"
    trusted = cache.get(key)
    if trusted is None:
        trusted = commenter_may_write(client, login=login, user_id=user_id)
        cache.set(key, trusted, settings.FORGE_TRUST_CACHE_SECONDS)
    return bool(trusted)
