from __future__ import annotations

from typing import Any, cast

from django import forms

from core.coder_agents import coder_agent_choices

from .models import DESCRIPTION_MAX_LENGTH, TITLE_MAX_LENGTH, TaskCategory, TaskPriority, TaskStatus


class TaskForm(forms.Form):
    """Create or edit a task. An empty category or priority means "the default" on
    create and "unchanged" on edit (the quick-add box sends only a title)."""

    title = forms.CharField(
        max_length=TITLE_MAX_LENGTH,
        widget=forms.TextInput(attrs={"placeholder": "e.g. Add CSV export to the reports page", "autocomplete": "off"}),
    )
    description = forms.CharField(
        max_length=DESCRIPTION_MAX_LENGTH,
        required=False,
        help_text="What should change, and how will you know it works? The agents plan from this.",
        widget=forms.Textarea(attrs={"rows": 7, "placeholder": "Context, acceptance criteria, links…"}),
    )
    category = forms.ChoiceField(choices=TaskCategory.choices, required=False, initial=TaskCategory.FEATURE)
    priority = forms.ChoiceField(choices=TaskPriority.choices, required=False, initial=TaskPriority.MEDIUM)
    # Empty: the project's Coder (core/coder_agents.py); choices read when the form is made.
    coder_agent = forms.ChoiceField(
        label="Coder",
        required=False,
        help_text="Who edits the code for this task: the project's choice, the built-in Coder or a coding agent.",
    )
    # Which project the task goes to; without it, the current project.
    project = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["coder_agent"]).choices = coder_agent_choices(inherit="The project's Coder")


class BoardFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.SearchInput(attrs={"placeholder": "Search tasks…", "aria-label": "Search tasks"}),
    )
    category = forms.ChoiceField(
        choices=[("", "All categories"), *TaskCategory.choices],
        required=False,
        widget=forms.Select(attrs={"aria-label": "Filter by category"}),
    )


class TaskMoveForm(forms.Form):
    status = forms.ChoiceField(choices=TaskStatus.choices, label="Move to")
    position = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)
