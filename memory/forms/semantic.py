"""The forms of the "Memories" page: the search box and a memory to add."""

from __future__ import annotations

from typing import Any

from django import forms

from accounts.models import User
from memory.models.semantic import APPLIES_WHEN_MAX_LENGTH, MEMORY_MAX_LENGTH, DecayPolicy
from projects.models import Project
from projects.selectors import project_list_for_user

QUERY_MAX_LENGTH = 500


class RecallSearchForm(forms.Form):
    q = forms.CharField(max_length=QUERY_MAX_LENGTH, required=False, strip=True)
    min_confidence = forms.FloatField(min_value=0, max_value=1, required=False)


class MemoryForm(forms.Form):
    content = forms.CharField(
        max_length=MEMORY_MAX_LENGTH, widget=forms.Textarea(attrs={"rows": 3}), label="What to remember"
    )
    applies_when = forms.CharField(
        max_length=APPLIES_WHEN_MAX_LENGTH,
        required=False,
        label="Applies when",
        help_text="The kinds of tasks and files it is for; recall matches tasks against it too.",
    )
    memory_type = forms.CharField(max_length=50, initial="note", label="Type")
    decay_policy = forms.ChoiceField(choices=DecayPolicy.choices, initial=DecayPolicy.REINFORCEABLE, label="Decay")
    half_life_hours = forms.FloatField(min_value=0.01, required=False, label="Half-life (hours)")
    project = forms.ModelChoiceField(queryset=Project.objects.none(), required=False, empty_label="No project")
    is_global = forms.BooleanField(required=False, label="Global (every agent and project)")

    def __init__(self, *args: Any, user: User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field: forms.ModelChoiceField = self.fields["project"]  # type: ignore[assignment]
        field.queryset = project_list_for_user(user=user).order_by("name")


class MemoryEditForm(forms.Form):
    content = forms.CharField(max_length=MEMORY_MAX_LENGTH, widget=forms.Textarea(attrs={"rows": 5}), label="Memory")
    applies_when = forms.CharField(
        max_length=APPLIES_WHEN_MAX_LENGTH,
        required=False,
        label="Applies when",
        help_text="The kinds of tasks and files it is for; recall matches tasks against it too.",
    )
