"""Pull requests: where run branches are pushed, which forge opens their pull requests,
and the push itself (never forced)."""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError

from core.crypto import decrypt_secret, encrypt_secret

from ..clone import PushError, push_to
from ..forges import ForgeClient, ForgeError, ForgeKind, forge_client, forge_host_check
from ..models import BaseUpdate, Repository
from .forge_trust import forge_trust_clean
from .linking import validate_git_url

if TYPE_CHECKING:
    from accounts.models import User


FORGE_FIELDS_REQUIRED = "Give this too, to open pull requests on the forge."
FORGE_BAD_API_URL = "Give the forge's API base URL: https://api.github.com, https://gitlab.example.com/api/v4, …"
FORGE_BAD_REPOSITORY = "Give the repository as owner/name (GitLab: group/subgroup/project)."
FORGE_BAD_TOKEN = "A token is one word of at most 500 characters."
FORGE_BAD_ISSUE_LABEL = "A label is at most 100 characters, without commas (the forges' lists separate labels by them)."
PUSH_TARGET_UNAVAILABLE = "There is no repository at that path that you can push to."
NO_PUSH_TARGET = "The repository has no remote to push to: set one under Pull requests on its page."
FORGE_API_DEFAULTS: dict[str, str] = {
    ForgeKind.GITHUB: "https://api.github.com",
    ForgeKind.GITLAB: "https://gitlab.com/api/v4",
}
_FORGE_REPOSITORY = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)+$")


def _validate_forge_api_url(url: str) -> str:
    url = url.strip().rstrip("/")
    try:
        # ValueError: not a URL (a bracket left open, a port past 65535 …): as bad as any.
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValidationError({"forge_api_url": [FORGE_BAD_API_URL]}) from None
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password or port == 0:
        raise ValidationError({"forge_api_url": [FORGE_BAD_API_URL]})
    try:
        forge_host_check(url)
    except ForgeError as error:
        # A host that does not resolve now is left to the request, which checks again.
        if not error.retryable:
            raise ValidationError({"forge_api_url": [error.message]}) from None
    return url


def repository_set_forge(
    *,
    repository: Repository,
    user: User,
    push_url: str = "",
    forge_kind: str = "",
    forge_api_url: str = "",
    forge_repository: str = "",
    token: str | None = None,
    forge_trusted_commenters: str | None = None,
    forge_trusted_logins: str | None = None,
    forge_issue_label: str | None = None,
    forge_issue_assigned: bool | None = None,
    base_update: str | None = None,
) -> Repository:
    """Where run branches are pushed and which forge opens their pull requests.
    ``token``: None keeps the saved one, "" removes it. A webhook secret is made the
    first time a forge is set. Whose reviews there become rounds
    (``forge_trusted_commenters``, ``forge_trusted_logins``), which of the forge's issues
    become tasks (``forge_issue_label``, ``forge_issue_assigned``) and how a run's branch
    takes in a moved base (``base_update``, BaseUpdate): None keeps the saved setting."""
    errors: dict[str, list[str]] = {}
    fields: dict[str, Any] = {"push_url": "", "forge_kind": forge_kind, "forge_api_url": "", "forge_repository": ""}
    if forge_trusted_commenters is not None or forge_trusted_logins is not None:
        try:
            fields.update(
                forge_trust_clean(
                    forge_trusted_commenters=repository.forge_trusted_commenters
                    if forge_trusted_commenters is None
                    else forge_trusted_commenters,
                    forge_trusted_logins=repository.forge_trusted_logins
                    if forge_trusted_logins is None
                    else forge_trusted_logins,
                )
            )
        except ValidationError as error:
            errors.update(error.message_dict)
    if push_url.strip():
        try:
            fields["push_url"] = validate_git_url(push_url, user, field="push_url", unavailable=PUSH_TARGET_UNAVAILABLE)
        except ValidationError as error:
            errors.update(error.message_dict)
    if forge_kind and forge_kind not in ForgeKind.values:
        errors["forge_kind"] = [f"Choose one of: {', '.join(ForgeKind.values)}."]
    elif forge_kind:
        api_url = forge_api_url.strip() or FORGE_API_DEFAULTS.get(forge_kind, "")
        if not api_url:
            errors["forge_api_url"] = [FORGE_FIELDS_REQUIRED]
        else:
            try:
                fields["forge_api_url"] = _validate_forge_api_url(api_url)
            except ValidationError as error:
                errors.update(error.message_dict)
        name = forge_repository.strip().strip("/")
        if not name:
            errors["forge_repository"] = [FORGE_FIELDS_REQUIRED]
        elif not _FORGE_REPOSITORY.match(name) or len(name) > 255:
            errors["forge_repository"] = [FORGE_BAD_REPOSITORY]
        fields["forge_repository"] = name
        if not fields["push_url"] and not repository.origin_url:
            errors.setdefault("push_url", [FORGE_FIELDS_REQUIRED])
    if base_update is not None:
        if base_update not in BaseUpdate.values:
            errors["base_update"] = [f"Choose one of: {', '.join(BaseUpdate.values)}."]
        fields["base_update"] = base_update
    if token is not None:
        token = token.strip()
        if len(token) > 500 or any(ch.isspace() for ch in token):
            errors["token"] = [FORGE_BAD_TOKEN]
        fields["forge_token_encrypted"] = encrypt_secret(token)
    if forge_issue_label is not None:
        label = forge_issue_label.strip()
        if len(label) > 100 or "," in label:
            errors["forge_issue_label"] = [FORGE_BAD_ISSUE_LABEL]
        fields["forge_issue_label"] = label
    if forge_issue_assigned is not None:
        fields["forge_issue_assigned"] = bool(forge_issue_assigned)
    if token is not None or fields["forge_api_url"] != repository.forge_api_url:
        fields["forge_login"] = ""  # another account, or another forge: learned again
    if any(
        name in fields and fields[name] != getattr(repository, name)
        for name in ("forge_api_url", "forge_repository", "forge_issue_label", "forge_issue_assigned")
    ):
        fields["forge_issues_since"] = ""  # other issues are wanted now: the next poll reads them all
    if forge_kind and not (token or (token is None and repository.forge_token_encrypted)):
        errors.setdefault("token", [FORGE_FIELDS_REQUIRED])
    if errors:
        raise ValidationError(errors)
    if forge_kind and not repository.forge_webhook_secret_encrypted:
        fields["forge_webhook_secret_encrypted"] = encrypt_secret(secrets.token_urlsafe(32))
    for name, value in fields.items():
        setattr(repository, name, value)
    repository.save(update_fields=[*fields, "updated_at"])
    return repository


def repository_forge_client(repository: Repository) -> ForgeClient:
    """The repository's forge, with its token."""
    return forge_client(
        kind=repository.forge_kind,
        api_url=repository.forge_api_url,
        repository=repository.forge_repository,
        token=decrypt_secret(repository.forge_token_encrypted),
    )


def branch_push(*, repository: Repository, user: User, branch: str) -> str:
    """Push ``branch`` to the repository's push target; returns the target. A local
    target must still be a folder ``user`` may use (sharing can be withdrawn)."""
    target = push_target_checked(repository=repository, user=user)
    push_to(Path(repository.path), target, branch)
    return target


def push_target_checked(*, repository: Repository, user: User) -> str:
    """The repository's push target (PushError when it has none). A local target must
    still be a folder ``user`` may use (sharing can be withdrawn)."""
    target = repository.push_target
    if not target:
        raise PushError(NO_PUSH_TARGET)
    if target.startswith("/"):
        try:
            validate_git_url(target, user, field="push_url", unavailable=PUSH_TARGET_UNAVAILABLE)
        except ValidationError:
            raise PushError(PUSH_TARGET_UNAVAILABLE) from None
    return target
