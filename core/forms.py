"""What every app's HTML forms share."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError


def add_service_errors(form: forms.Form, exc: ValidationError) -> None:
    """Show a service's ValidationError on the form: field errors beside their field
    (or at the top when the form has no such field), the rest at the top."""
    if hasattr(exc, "error_dict"):
        for field, messages in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, messages)
    else:
        form.add_error(None, exc.messages)
