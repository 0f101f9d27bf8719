from __future__ import annotations

from django import forms

from .forges import ForgeKind
from .models import BASE_UPDATE_HELP, BaseUpdate, ForgeTrust, MergeStrategy


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
    base_image = forms.CharField(
        max_length=500,
        required=False,
        label="Base image",
        help_text="A container image whose files setup and tests run on instead of the server's, e.g. "
        "python:3.12-slim or ghcr.io/team/ci:1; a local OCI layout as oci:<path>:<tag>. Empty: the server's own.",
        widget=forms.TextInput(attrs={"placeholder": "python:3.12-slim", "spellcheck": "false"}),
    )
    field_order = ["base_branch", "merge_strategy", "test_command", "base_image"]

    def __init__(self, *args: object, branches: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["base_branch"].choices = [(branch, branch) for branch in branches]  # type: ignore[attr-defined]


class ForgeForm(forms.Form):
    push_url = forms.CharField(
        max_length=1000,
        required=False,
        label="Push to",
        help_text="The remote that gets run branches: https://, ssh://, user@host:path, or a bare repository under "
        "the repositories folder. Empty: the URL it was cloned from.",
        widget=forms.TextInput(attrs={"placeholder": "git@github.com:team/app.git", "spellcheck": "false"}),
    )
    forge_kind = forms.ChoiceField(
        choices=[("", "None: no pull requests"), *ForgeKind.choices], required=False, label="Forge"
    )
    forge_api_url = forms.CharField(
        max_length=500,
        required=False,
        label="API base URL",
        help_text="Empty: api.github.com or gitlab.com/api/v4. GitHub Enterprise: https://host/api/v3; "
        "Gitea/Forgejo: https://host/api/v1.",
        widget=forms.TextInput(attrs={"spellcheck": "false"}),
    )
    forge_repository = forms.CharField(
        max_length=255,
        required=False,
        label="Repository on the forge",
        widget=forms.TextInput(attrs={"placeholder": "team/app", "spellcheck": "false"}),
    )
    token = forms.CharField(
        max_length=500,
        required=False,
        label="Access token",
        help_text="Stored encrypted and never shown again. Empty: keep the saved one.",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
    )
    remove_token = forms.BooleanField(required=False, label="Remove the saved token")
    forge_trusted_commenters = forms.ChoiceField(
        choices=[("", "The server's default"), *ForgeTrust.choices],
        required=False,
        label="Reviews acted on",
        help_text="A review on the pull request sends the run back to the Coder only when its author is trusted; "
        "others are shown on the run's page, never acted on.",
    )
    forge_trusted_logins = forms.CharField(
        max_length=2000,
        required=False,
        label="Trusted logins",
        help_text="With “Only the logins listed”: forge logins, comma-separated.",
        widget=forms.TextInput(attrs={"placeholder": "alice, bob", "spellcheck": "false"}),
    )
    forge_issue_label = forms.CharField(
        max_length=100,
        required=False,
        label="Issues with this label become tasks",
        help_text="An issue on the forge with this label is imported into the backlog, and followed (edits, "
        "closing). Empty: none by label.",
        widget=forms.TextInput(attrs={"placeholder": "autocoder", "spellcheck": "false"}),
    )
    forge_issue_assigned = forms.BooleanField(
        required=False, label="Issues assigned to the token's account become tasks"
    )
    ci_required_checks = forms.CharField(
        max_length=11_000,
        required=False,
        label="Required checks",
        help_text="The pull request's checks that must pass, one a line; empty: every check. Failing ones send "
        "the run back to the Coder.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "placeholder": "unit\nlint"}),
    )
    ci_fix_rounds_max = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=20,
        label="Rounds to fix failing checks",
        help_text="How many times the Coder is sent back for failing checks; empty: the server's default.",
    )
    merge_when_green = forms.BooleanField(
        required=False,
        label="Merge when green",
        help_text="Offer “Approve and merge when green” on runs: the pull request is merged on the forge once "
        "its checks pass.",
    )
    base_update = forms.ChoiceField(
        choices=BaseUpdate.choices,
        initial=BaseUpdate.MERGE,
        required=False,
        label="When the base moves on",
        help_text=BASE_UPDATE_HELP,
    )

    def token_argument(self) -> str | None:
        """repository_set_forge's token: "" removes the saved one, None keeps it."""
        if self.cleaned_data["remove_token"]:
            return ""
        return self.cleaned_data["token"] or None


class EnvironmentForm(forms.Form):
    setup_script = forms.CharField(
        max_length=20_000,
        required=False,
        label="Setup script",
        help_text=(
            "Shell commands run once per environment at the root of a checkout, with network, before the tests "
            "(sh -e: the first failing command stops it), e.g. python3 -m venv .venv && .venv/bin/pip install -r "
            "requirements.txt. What it leaves in the checkout (.venv, node_modules, …) is kept and given to every "
            "run. Empty: the repository's own .autocoder/setup.sh or devcontainer.json commands, if any."
        ),
        widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false", "class": "code-input"}),
        strip=False,
    )
    tests_network = forms.BooleanField(
        required=False,
        label="Tests may use the network",
        help_text="Off by default: only setup reaches the network.",
    )


class VariableForm(forms.Form):
    """A project variable: set (or replace) one. A secret's value is never rendered back."""

    name = forms.CharField(
        max_length=1000,
        label="Name",
        widget=forms.TextInput(attrs={"placeholder": "API_TOKEN", "spellcheck": "false", "autocomplete": "off"}),
    )
    value = forms.CharField(
        required=False,
        strip=False,
        label="Value",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
    )
    secret = forms.BooleanField(
        required=False,
        initial=True,
        label="Secret",
        help_text="Encrypted, masked in every output, never shown again. Untick for a plain setting you want to see.",
    )
