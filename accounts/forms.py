"""Input forms for the login, registration and account pages.

They check shape only; the rules (password strength, unique email, credentials) are
in accounts.services.
"""

from __future__ import annotations

from typing import Any

from django import forms

# Long enough for any passphrase, short enough that hashing it costs nothing unusual.
PASSWORD_MAX_LENGTH = 4096
PASSWORDS_DIFFER = "The two passwords do not match."
NEW_PASSWORD_HELP = "At least 8 characters other than spaces; not a common or all-numeric password."


def _new_password_field(*, label: str | None = None, help_text: str = NEW_PASSWORD_HELP) -> forms.CharField:
    return forms.CharField(
        label=label,
        max_length=PASSWORD_MAX_LENGTH,
        strip=False,
        help_text=help_text,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )


def _confirmed(form: forms.Form, field: str, confirmation: str) -> dict[str, Any]:
    """The form's cleaned data, with an error on ``confirmation`` if it differs from ``field``."""
    cleaned = form.cleaned_data
    password, confirm = cleaned.get(field), cleaned.get(confirmation)
    if password and confirm and password != confirm:
        form.add_error(confirmation, PASSWORDS_DIFFER)
    return cleaned


class LoginForm(forms.Form):
    email = forms.EmailField(
        max_length=254,
        widget=forms.EmailInput(attrs={"autocomplete": "email", "autofocus": True, "placeholder": "you@company.com"}),
    )
    password = forms.CharField(
        max_length=PASSWORD_MAX_LENGTH,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )


class RegisterForm(forms.Form):
    display_name = forms.CharField(
        label="Your name",
        max_length=100,
        required=False,
        widget=forms.TextInput(attrs={"autocomplete": "name", "autofocus": True, "placeholder": "Ada Lovelace"}),
    )
    email = forms.EmailField(
        max_length=254,
        widget=forms.EmailInput(attrs={"autocomplete": "email", "placeholder": "you@company.com"}),
    )
    password = _new_password_field()
    password_confirm = _new_password_field(label="Confirm password", help_text="")

    def clean(self) -> dict[str, Any]:
        super().clean()
        return _confirmed(self, "password", "password_confirm")


class PasswordChangeForm(forms.Form):
    current_password = forms.CharField(
        max_length=PASSWORD_MAX_LENGTH,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password", "autofocus": True}),
    )
    new_password = _new_password_field()
    new_password_confirm = _new_password_field(label="Confirm new password", help_text="")

    def clean(self) -> dict[str, Any]:
        super().clean()
        return _confirmed(self, "new_password", "new_password_confirm")


class TokenCreateForm(forms.Form):
    name = forms.CharField(
        label="Token name",
        max_length=100,
        required=False,
        help_text="A label to tell tokens apart, e.g. the script or machine that uses it.",
        widget=forms.TextInput(attrs={"placeholder": "CI on build-01"}),
    )
