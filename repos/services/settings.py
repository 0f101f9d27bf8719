"""A linked repository's settings: base branch, merge strategy, test command, base image."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from core.sandbox_image_references import ImageReferenceInvalid, parse_image_reference

from ..clone import CloneTarget, address_allowed, resolve
from ..folders import folder_available_to, repos_root
from ..models import Repository, RepositoryStatus
from .linking import resolve_base_branch, validate_repository_settings

if TYPE_CHECKING:
    from accounts.models import User


BASE_IMAGE_HOST_NOT_ALLOWED = (
    "The image's registry is on a private, loopback, link-local or otherwise internal address, which the server "
    "does not connect to (an operator can allow networks with CLONE_ALLOWED_NETWORKS)."
)
BASE_IMAGE_LAYOUT_UNAVAILABLE = "There is no OCI layout at that path that you can use."


def _validate_base_image(base_image: str, *, user: User) -> str:
    """A base image reference as stored: well formed (core/sandbox_images.py), a local
    layout only in a folder the project's owner may use, a registry only on an address
    the server may connect to (as for clones; the pull itself is not pinned)."""
    value = base_image.strip()
    if not value:
        return ""
    try:
        source = parse_image_reference(value)
    except ImageReferenceInvalid as error:
        raise ValidationError({"base_image": [error.message]}) from None
    if source.layout is not None:
        if repos_root() in source.layout.parents and not folder_available_to(user=user, path=source.layout):
            raise ValidationError({"base_image": [BASE_IMAGE_LAYOUT_UNAVAILABLE]})
        return value
    host, port = source.registry_host
    try:
        addresses = resolve(CloneTarget("https", host, port))
    except (OSError, UnicodeError):
        return value  # not resolvable now: the pull will say so
    if not all(address_allowed(address) for address in addresses):
        raise ValidationError({"base_image": [BASE_IMAGE_HOST_NOT_ALLOWED]})
    return value


def repository_update(
    *,
    repository: Repository,
    base_branch: str | None = None,
    merge_strategy: str | None = None,
    test_command: str | None = None,
    base_image: str | None = None,
) -> Repository:
    strategy = repository.merge_strategy if merge_strategy is None else merge_strategy
    command = repository.test_command if test_command is None else test_command
    validate_repository_settings(strategy, command)
    fields: dict[str, Any] = {"merge_strategy": strategy, "test_command": command.strip()}
    if base_image is not None and base_image.strip() != repository.base_image:
        fields["base_image"] = _validate_base_image(base_image, user=repository.project.owner)
    if base_branch is not None and base_branch.strip() != repository.base_branch:
        if repository.status != RepositoryStatus.READY:
            raise ValidationError({"base_branch": ["Wait until the repository is ready."]})
        fields["base_branch"] = resolve_base_branch(Path(repository.path), base_branch)
    for name, value in fields.items():
        setattr(repository, name, value)
    repository.save(update_fields=[*fields, "updated_at"])
    return repository
