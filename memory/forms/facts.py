"""The forms of the memory page: a fact or a goal, for all projects or one of the user's."""

from __future__ import annotations

from typing import Any

from django import forms

from accounts.models import User
from memory.models.facts import DEADLINE_MAX_LENGTH, FACT_MAX_LENGTH, GOAL_MAX_LENGTH
from projects.models import Project
from projects.selectors import project_list_for_user


class _ProjectForm(forms.Form):
    project = forms.ModelChoiceField(
        queryset=Project.objects.none(),
        required=False,
        empty_label="All projects",
    )

    def __init__(self, *args: Any, user: User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field: forms.ModelChoiceField = self.fields["project"]  # type: ignore[assignment]
        field.queryset = project_list_for_user(user=user)


class FactForm(_ProjectForm):
    content = forms.CharField(
        max_length=FACT_MAX_LENGTH,
        label="Fact",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "e.g. We deploy with GitHub Actions"}),
    )
    field_order = ["content", "project"]


class GoalForm(_ProjectForm):
    text = forms.CharField(
        max_length=GOAL_MAX_LENGTH,
        label="Goal",
        widget=forms.TextInput(attrs={"placeholder": "e.g. Ship the CSV export", "autocomplete": "off"}),
    )
    deadline = forms.CharField(
        max_length=DEADLINE_MAX_LENGTH,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "e.g. Friday", "autocomplete": "off"}),
    )
    field_order = ["text", "deadline", "project"]
