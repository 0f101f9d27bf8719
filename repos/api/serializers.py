from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from core.api import StrictBooleanField, StrictCharField
from core.crypto import decrypt_secret

from ..forges import ForgeKind
from ..models import BASE_UPDATE_HELP, BaseUpdate, ForgeTrust, MergeStrategy, Repository


class RepositoryStateSerializer(serializers.Serializer[Any]):
    branch = serializers.CharField()
    head_commit = serializers.CharField()
    head_subject = serializers.CharField()
    head_author = serializers.CharField()
    head_date = serializers.CharField()
    clean = serializers.BooleanField()
    changed_files = serializers.IntegerField()
    base_branch_exists = serializers.BooleanField()
    branches = serializers.ListField(child=serializers.CharField())
    error = serializers.CharField()


class SuggestionSerializer(serializers.Serializer[Any]):
    setup_script = serializers.CharField(help_text="Commands that would prepare a checkout, one a line.")
    test_command = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField(), help_text="What each file read suggested.")


class RepositorySerializer(serializers.ModelSerializer[Repository]):
    project = serializers.IntegerField(source="project_id", read_only=True)
    path = serializers.CharField(
        source="display_path", read_only=True, help_text="The folder, relative to the server's repositories folder."
    )
    state = RepositoryStateSerializer(read_only=True, help_text="The checkout as it is now.")
    link_warnings = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="What the server cannot give this repository's runs (LFS files without git-lfs, submodules "
        "whose URLs are refused or could not be fetched), found when it was linked or a worktree was made.",
    )
    worktrees_bytes = serializers.IntegerField(read_only=True, help_text="Disk used by the runs' worktrees.")
    ci_fix_rounds_limit = serializers.IntegerField(
        read_only=True, help_text="Rounds for failing checks in force: ci_fix_rounds_max, or the server's default."
    )
    suggested = SuggestionSerializer(
        read_only=True,
        allow_null=True,
        help_text="A setup script and test command the checkout's files suggest (ready repositories only; "
        "nothing of the checkout is run).",
    )
    push_url = serializers.CharField(
        source="push_url_display",
        read_only=True,
        help_text="Where run branches are pushed (a local one relative to the repositories folder); empty: origin_url.",
    )
    forge_token_saved = serializers.SerializerMethodField(help_text="Whether an access token is saved (never shown).")

    forge_webhook_url = serializers.SerializerMethodField(
        help_text="Where the forge sends its pull-request events (set it on the forge's webhook settings)."
    )
    forge_webhook_secret = serializers.SerializerMethodField(
        help_text="The secret the forge signs them with (GitLab: its secret token); the server made it."
    )

    def get_forge_token_saved(self, repository: Repository) -> bool:
        return bool(repository.forge_token_encrypted)

    def get_forge_webhook_url(self, repository: Repository) -> str | None:
        if not (repository.forge_kind and repository.forge_webhook_secret_encrypted):
            return None
        path = reverse("api:forge-webhook", args=[repository.pk])
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path

    def get_forge_webhook_secret(self, repository: Repository) -> str | None:
        if not repository.forge_kind:
            return None
        return decrypt_secret(repository.forge_webhook_secret_encrypted) or None

    class Meta:
        model = Repository
        fields = [
            "project",
            "path",
            "origin_url",
            "base_branch",
            "merge_strategy",
            "test_command",
            "base_image",
            "status",
            "error",
            "link_warnings",
            "state",
            "worktrees_bytes",
            "suggested",
            "push_url",
            "forge_kind",
            "forge_api_url",
            "forge_repository",
            "forge_token_saved",
            "forge_webhook_url",
            "forge_webhook_secret",
            "forge_trusted_commenters",
            "forge_trusted_logins",
            "forge_issue_label",
            "forge_issue_assigned",
            "forge_issues_error",
            "ci_required_checks",
            "ci_fix_rounds_max",
            "ci_fix_rounds_limit",
            "merge_when_green",
            "base_update",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class RepositoryLinkSerializer(serializers.Serializer[Any]):
    path = StrictCharField(max_length=1000, help_text="A folder under the server's REPOS_ROOT (absolute or relative).")
    base_branch = StrictCharField(max_length=255, required=False, allow_blank=True, default="")
    merge_strategy = serializers.ChoiceField(choices=MergeStrategy.choices, default=MergeStrategy.MERGE)
    test_command = StrictCharField(max_length=1000, required=False, allow_blank=True, default="")


class RepositoryCloneSerializer(serializers.Serializer[Any]):
    url = StrictCharField(
        max_length=1000, help_text="https://, ssh://, git://, user@host:path, or a local path under REPOS_ROOT."
    )
    base_branch = StrictCharField(max_length=255, required=False, allow_blank=True, default="")
    merge_strategy = serializers.ChoiceField(choices=MergeStrategy.choices, default=MergeStrategy.MERGE)
    test_command = StrictCharField(max_length=1000, required=False, allow_blank=True, default="")


class RepositoryUpdateSerializer(serializers.Serializer[Any]):
    base_branch = StrictCharField(max_length=255, required=False)
    merge_strategy = serializers.ChoiceField(choices=MergeStrategy.choices, required=False)
    test_command = StrictCharField(max_length=1000, required=False, allow_blank=True)
    base_image = StrictCharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="A container image setup and tests run on (python:3.12-slim, ghcr.io/team/ci:1, "
        "…@sha256:…) or a local OCI layout (oci:<path>:<tag>); empty: the server's own files.",
    )


class RepositoryForgeSerializer(serializers.Serializer[Any]):
    push_url = StrictCharField(
        max_length=1000, required=False, allow_blank=True, default="", help_text="Empty: the URL it was cloned from."
    )
    forge_kind = serializers.ChoiceField(
        choices=[("", "none"), *ForgeKind.choices], required=False, default="", help_text="Empty: no pull requests."
    )
    forge_api_url = StrictCharField(
        max_length=500, required=False, allow_blank=True, default="", help_text="Empty: GitHub's or GitLab's own."
    )
    forge_repository = StrictCharField(max_length=255, required=False, allow_blank=True, default="")
    base_update = serializers.ChoiceField(
        choices=BaseUpdate.choices, required=False, allow_null=True, default=None, help_text=BASE_UPDATE_HELP
    )
    token = StrictCharField(
        max_length=500,
        required=False,
        allow_blank=True,
        allow_null=True,
        default=None,
        write_only=True,
        help_text="The forge access token, stored encrypted and never returned. Absent or null: keep the saved "
        "one; empty: remove it.",
    )
    forge_trusted_commenters = serializers.ChoiceField(
        choices=[("", "the server's default"), *ForgeTrust.choices],
        required=False,
        allow_null=True,
        default=None,
        help_text="Whose reviews on the forge become a Coder round: collaborators (write access there) or list. "
        "Absent or null: keep; empty: the server's FORGE_TRUSTED_COMMENTERS.",
    )
    forge_trusted_logins = StrictCharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        allow_null=True,
        default=None,
        help_text="With list: the trusted forge logins, comma-separated. Absent or null: keep.",
    )
    forge_issue_label = StrictCharField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="Issues on the forge with this label become tasks; empty: none by label; absent: keep.",
    )
    forge_issue_assigned = StrictBooleanField(
        required=False, help_text="Issues assigned to the token's account become tasks; absent: keep."
    )
    ci_required_checks = serializers.ListField(
        child=StrictCharField(max_length=200),
        required=False,
        max_length=50,
        help_text="Names of the pull request's checks that must pass; empty: every check. Absent: kept.",
    )
    ci_fix_rounds_max = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=20,
        help_text="Rounds the Coder gets to make failing checks pass; null: the server's CI_FIX_ROUNDS_MAX. "
        "Absent: kept.",
    )
    merge_when_green = serializers.BooleanField(
        required=False,
        help_text="Merge a pull request on the forge once its checks pass, when a person approved it to "
        "(POST /api/runs/{id}/pull-request/merge-when-green). Absent: kept.",
    )


class ProjectVariableSerializer(serializers.Serializer[Any]):
    """A variable as listed: ``value`` only for a plain one; a secret says it is saved."""

    name = serializers.CharField()
    secret = serializers.BooleanField()
    value = serializers.CharField(required=False, help_text="Plain variables only: a secret's value is never returned.")
    saved = serializers.BooleanField(required=False, help_text="Secrets only: true, the value is saved.")
    readable = serializers.BooleanField(help_text="False when SECRET_KEY changed since: set it again.")
    updated_at = serializers.DateTimeField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data: dict[str, Any] = {"name": instance.name, "secret": instance.secret}
        if instance.secret:
            data["saved"] = True
        elif instance.value is not None:
            data["value"] = instance.value
        data["readable"] = instance.readable
        data["updated_at"] = serializers.DateTimeField().to_representation(instance.updated_at)
        return data


class ProjectVariableSetSerializer(serializers.Serializer[Any]):
    # Checked by the service (repos/variables.py), which says what is wrong with it.
    name = StrictCharField(max_length=1000, help_text="An environment variable name, e.g. API_TOKEN.")
    value = StrictCharField(
        allow_blank=True,
        trim_whitespace=False,
        write_only=True,
        help_text="Stored encrypted; a secret's is never returned.",
    )
    secret = StrictBooleanField(required=False, default=True, help_text="Masked in all output and never shown again.")
