from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from core.api import StrictBooleanField, StrictCharField
from core.coder_agents import CODER_AGENT_MAX_LENGTH, validate_coder_agent
from projects.models import (
    INSTRUCTIONS_MAX_LENGTH,
    LESSON_HALF_LIFE_MAX_HOURS,
    LLM_BASE_URL_MAX_LENGTH,
    PROJECT_NAME_MAX_LENGTH,
    RUNS_AT_ONCE_MAX,
    TASK_SPEND_CEILING_MAX_USD,
    LlmProvider,
    Project,
)

_description_max_length = Project._meta.get_field("description").max_length
assert _description_max_length is not None
DESCRIPTION_MAX_LENGTH: int = _description_max_length


class ProjectSerializer(serializers.ModelSerializer[Project]):
    task_count = serializers.IntegerField(read_only=True, help_text="How many tasks the project has.")
    llm_api_key_saved = serializers.SerializerMethodField(
        help_text="Whether a key for the project's endpoint is saved (never shown)."
    )

    def get_llm_api_key_saved(self, project: Project) -> bool:
        return bool(project.llm_api_key_encrypted)

    class Meta:
        model = Project
        fields = (
            "id",
            "name",
            "description",
            "llm_provider",
            "llm_base_url",
            "llm_api_key_saved",
            "llm_model",
            "planner_model",
            "coder_model",
            "reviewer_model",
            "llm_max_tokens",
            "token_budget",
            "instructions",
            "learn_distil",
            "lesson_half_life_hours",
            "runs_at_once",
            "task_spend_ceiling_usd",
            "coder_agent",
            "task_count",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields


class ProjectInputSerializer(serializers.Serializer):
    """Body of POST (name required) and PATCH (every field optional)."""

    name = StrictCharField(max_length=PROJECT_NAME_MAX_LENGTH, help_text="Trimmed; unique per user, ignoring case.")
    description = StrictCharField(max_length=DESCRIPTION_MAX_LENGTH, allow_blank=True, required=False)
    llm_model = StrictCharField(
        max_length=100,
        allow_blank=True,
        required=False,
        help_text="Model for this project's runs; blank = server default.",
    )
    planner_model = StrictCharField(
        max_length=100, allow_blank=True, required=False, help_text="The Planner's model; blank = the project's."
    )
    coder_model = StrictCharField(
        max_length=100, allow_blank=True, required=False, help_text="The Coder's model; blank = the project's."
    )
    reviewer_model = StrictCharField(
        max_length=100, allow_blank=True, required=False, help_text="The Reviewer's model; blank = the project's."
    )
    llm_provider = serializers.ChoiceField(
        choices=LlmProvider.choices,
        allow_blank=True,
        required=False,
        help_text='Who answers the agents: "" the server\'s default, "anthropic", or "openai" (OpenAI-compatible).',
    )
    llm_base_url = StrictCharField(
        max_length=LLM_BASE_URL_MAX_LENGTH,
        allow_blank=True,
        required=False,
        help_text="The OpenAI-compatible endpoint's base URL (usually ending in /v1); blank = the server's. "
        "Its host must be public (or in the server's allowed networks).",
    )
    llm_api_key = StrictCharField(
        max_length=500,
        allow_blank=True,
        allow_null=True,
        required=False,
        trim_whitespace=False,
        help_text="The endpoint's API key, stored encrypted and never returned. "
        'Absent or null: keep the saved one; "" removes it.',
    )
    llm_max_tokens = serializers.IntegerField(
        min_value=1,
        max_value=128_000,
        allow_null=True,
        required=False,
        help_text="Max tokens per call; null = default.",
    )
    token_budget = serializers.IntegerField(
        min_value=1000,
        max_value=100_000_000,
        allow_null=True,
        required=False,
        help_text="Tokens one run may spend before it pauses; null = server default.",
    )
    instructions = StrictCharField(
        max_length=INSTRUCTIONS_MAX_LENGTH,
        allow_blank=True,
        required=False,
        help_text="Added to every agent's system prompt, after the repository's AGENTS.md or CLAUDE.md.",
    )
    learn_distil = StrictBooleanField(
        required=False,
        help_text="Distil a run's findings and feedback into at most three lessons with one short call; default true.",
    )
    lesson_half_life_hours = serializers.FloatField(
        min_value=1,
        max_value=LESSON_HALF_LIFE_MAX_HOURS,
        allow_null=True,
        required=False,
        help_text="Half-life of lessons from review findings, in hours; null = server default.",
    )
    runs_at_once = serializers.IntegerField(
        min_value=1,
        max_value=RUNS_AT_ONCE_MAX,
        allow_null=True,
        required=False,
        help_text="How many of the project's runs may work at once (more wait queued); null = server default.",
    )
    task_spend_ceiling_usd = serializers.DecimalField(
        max_digits=10,
        decimal_places=2,
        min_value=Decimal("0"),
        max_value=TASK_SPEND_CEILING_MAX_USD,
        allow_null=True,
        required=False,
        help_text="What one task's runs may spend together, in USD, before the work pauses; "
        "null = server default, 0 = no ceiling.",
    )
    coder_agent = StrictCharField(
        max_length=CODER_AGENT_MAX_LENGTH,
        allow_blank=True,
        required=False,
        validators=[validate_coder_agent],
        help_text="Who edits the code: blank or `built-in` = the built-in Coder, or the name of a coding agent "
        "over ACP installed on the server (`ACP_AGENTS`, e.g. `claude-code`, `opencode`); another name is a 400.",
    )
