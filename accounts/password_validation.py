"""Password rules of our own, beside Django's (settings.AUTH_PASSWORD_VALIDATORS)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import ngettext

TOO_FEW_NON_SPACE = "This password needs at least %(min_length)d characters other than spaces."


class MinimumNonSpaceLengthValidator:
    """Counts the characters that are not whitespace: Django's MinimumLengthValidator
    lets eight spaces through. Spaces inside a passphrase are fine, they just do not
    count."""

    def __init__(self, min_length: int = 8) -> None:
        self.min_length = min_length

    def validate(self, password: str, user: Any = None) -> None:
        if sum(not char.isspace() for char in password) < self.min_length:
            raise ValidationError(
                TOO_FEW_NON_SPACE, code="password_too_few_non_space", params={"min_length": self.min_length}
            )

    def get_help_text(self) -> str:
        return ngettext(
            "Your password must contain at least %(min_length)d character other than spaces.",
            "Your password must contain at least %(min_length)d characters other than spaces.",
            self.min_length,
        ) % {"min_length": self.min_length}
