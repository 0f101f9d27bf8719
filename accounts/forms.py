"""Input forms for the login and registration pages.

They check shape only; the rules (password strength, unique email, credentials) are
in accounts.services.
"""

from __future__ import annotations

from typing import Any

from django import forms

# Long enough for any passphrase, short enough that hashing it costs nothing unusual.
PASSWORD_MAX_LENGTH = 4096
PASSWORDS_DIFFER = "The two passwords do not match."


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
    password = forms.CharField(
        max_length=PASSWORD_MAX_LENGTH,
        strip=False,
        help_text="At least 8 characters.",
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    password_confirm = forms.CharField(
        label="Confirm password",
        max_length=PASSWORD_MAX_LENGTH,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        password, confirm = cleaned.get("password"), cleaned.get("password_confirm")
        if password and confirm and password != confirm:
            self.add_error("password_confirm", PASSWORDS_DIFFER)
        return cleaned
