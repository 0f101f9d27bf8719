from __future__ import annotations

from django import forms

from .models import MergeStrategy


class _SettingsFields(forms.Form):
    merge_strategy = forms.ChoiceField(
        choices=MergeStrategy.choices,
        initial=MergeStrategy.MERGE,
        help_text="How an approved run's branch joins the base branch.",
    )
    test_command = forms.CharField(
        max_length=1000,
        required=False,
        help_text="Runs in each run's worktree after coding, e.g. pytest -q. Empty: no test step.",
        widget=forms.TextInput(attrs={"placeholder": "pytest -q", "spellcheck": "false"}),
    )


class LinkForm(_SettingsFields):
    path = forms.CharField(
        max_length=1000,
        label="Folder on the server",
        help_text="A git working tree under the server's repositories folder (REPOS_ROOT), e.g. myapp.",
        widget=forms.TextInput(attrs={"placeholder": "myapp", "spellcheck": "false"}),
    )
    base_branch = forms.CharField(
        max_length=255, required=False, help_text="Empty: the branch the repository is on now."
    )
    field_order = ["path", "base_branch", "merge_strategy", "test_command"]


class CloneForm(_SettingsFields):
    url = forms.CharField(
        max_length=1000,
        label="Clone from",
        help_text="https://, ssh://, user@host:path, or a local path under the repositories folder.",
        widget=forms.TextInput(attrs={"placeholder": "https://github.com/you/app.git", "spellcheck": "false"}),
    )
    base_branch = forms.CharField(max_length=255, required=False, help_text="Empty: the remote's default branch.")
    field_order = ["url", "base_branch", "merge_strategy", "test_command"]


class SettingsForm(_SettingsFields):
    base_branch = forms.ChoiceField(choices=(), help_text="Runs branch from it; approval merges into it.")
    field_order = ["base_branch", "merge_strategy", "test_command"]

    def __init__(self, *args: object, branches: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["base_branch"].choices = [(branch, branch) for branch in branches]  # type: ignore[attr-defined]
