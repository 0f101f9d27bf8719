from __future__ import annotations

from django import forms

from .services import FEEDBACK_REQUIRED

FEEDBACK_MAX_LENGTH = 10_000
API_KEY_MAX_LENGTH = 500


class StartRunForm(forms.Form):
    """Start a run; a person without a server-side key may give their own for this run."""

    api_key = forms.CharField(
        required=False,
        max_length=API_KEY_MAX_LENGTH,
        strip=True,
        widget=forms.PasswordInput(attrs={"autocomplete": "off", "placeholder": "sk-ant-…"}),
        label="Your Anthropic API key",
        help_text="Used for this run only. Stored encrypted, never shown or logged.",
    )


class RequestChangesForm(forms.Form):
    feedback = forms.CharField(
        max_length=FEEDBACK_MAX_LENGTH,
        strip=True,
        error_messages={"required": FEEDBACK_REQUIRED},
        widget=forms.Textarea(attrs={"rows": 3}),
    )
