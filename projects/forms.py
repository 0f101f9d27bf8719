from __future__ import annotations

from django import forms

from .models import PROJECT_NAME_MAX_LENGTH


class ProjectForm(forms.Form):
    name = forms.CharField(
        max_length=PROJECT_NAME_MAX_LENGTH,
        widget=forms.TextInput(attrs={"placeholder": "e.g. Billing service", "autocomplete": "off"}),
    )
    description = forms.CharField(
        max_length=2000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "What is this project about? (optional)"}),
    )
