"""CI on pull requests, per repository: which checks must pass (empty: every one), how
many rounds the Coder gets to make failing ones pass (empty: the server's
CI_FIX_ROUNDS_MAX), and whether a pull request a person approved is merged on the forge
once they pass (pipelines.pull_requests.checks and merging read them)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from ..models import Repository

CI_CHECK_NAMES_MAX = 50
CI_CHECK_NAME_MAX_LENGTH = 200
CI_FIX_ROUNDS_CEILING = 20
CI_BAD_CHECK_NAMES = (
    f"Give at most {CI_CHECK_NAMES_MAX} check names, one a line, each of at most {CI_CHECK_NAME_MAX_LENGTH} characters."
)
CI_BAD_FIX_ROUNDS = f"Give a number of rounds from 0 to {CI_FIX_ROUNDS_CEILING}, or nothing for the server's default."


def ci_check_names(text: str) -> list[str]:
    """Check names as a person types them: one a line (or comma-separated), blanks dropped."""
    return [name.strip() for line in text.splitlines() for name in line.split(",") if name.strip()]


def ci_settings_clean(
    *, ci_required_checks: Any = None, ci_fix_rounds_max: Any = ..., merge_when_green: Any = None
) -> dict[str, Any]:
    """The CI settings given (None / ... : not given, kept), checked; ValidationError with
    each field's error."""
    errors: dict[str, list[str]] = {}
    fields: dict[str, Any] = {}
    if ci_required_checks is not None:
        names = ci_required_checks
        if (
            not isinstance(names, list)
            or len(names) > CI_CHECK_NAMES_MAX
            or not all(isinstance(name, str) and 0 < len(name.strip()) <= CI_CHECK_NAME_MAX_LENGTH for name in names)
            or any(not name.isprintable() for name in names)
        ):
            errors["ci_required_checks"] = [CI_BAD_CHECK_NAMES]
        else:
            fields["ci_required_checks"] = list(dict.fromkeys(name.strip() for name in names))
    if ci_fix_rounds_max is not ...:
        rounds = ci_fix_rounds_max
        if rounds is not None and (
            isinstance(rounds, bool) or not isinstance(rounds, int) or not 0 <= rounds <= CI_FIX_ROUNDS_CEILING
        ):
            errors["ci_fix_rounds_max"] = [CI_BAD_FIX_ROUNDS]
        else:
            fields["ci_fix_rounds_max"] = rounds
    if merge_when_green is not None:
        fields["merge_when_green"] = bool(merge_when_green)
    if errors:
        raise ValidationError(errors)
    return fields


def repository_set_ci(*, repository: Repository, **given: Any) -> Repository:
    """Save the CI settings given (``ci_settings_clean``'s arguments)."""
    fields = ci_settings_clean(**given)
    for name, value in fields.items():
        setattr(repository, name, value)
    if fields:
        repository.save(update_fields=[*fields, "updated_at"])
    return repository
