from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

from django import forms
from django.conf import settings

from core.coder_agents import coder_agent_choices

from .models import (
    INSTRUCTIONS_MAX_LENGTH,
    LESSON_HALF_LIFE_MAX_HOURS,
    LLM_BASE_URL_MAX_LENGTH,
    PROJECT_NAME_MAX_LENGTH,
    RUNS_AT_ONCE_MAX,
    TASK_SPEND_CEILING_MAX_USD,
    LlmProvider,
)

TASK_SPEND_CEILING_HELP = (
    "What one task's runs may spend together, over every round; at the ceiling the work pauses until you raise it."
)


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
    llm_model = forms.CharField(
        label="Model",
        max_length=100,
        required=False,
        help_text="Leave empty for the server's default model.",
        widget=forms.TextInput(attrs={"placeholder": "server default", "autocomplete": "off"}),
    )
    llm_provider = forms.ChoiceField(
        label="Model provider",
        choices=LlmProvider.choices,
        required=False,
        help_text="Who answers this project's agents.",
    )
    llm_base_url = forms.CharField(
        label="Endpoint base URL",
        max_length=LLM_BASE_URL_MAX_LENGTH,
        required=False,
        help_text="OpenAI-compatible only, e.g. https://openrouter.ai/api/v1. Empty = the server's endpoint.",
        widget=forms.TextInput(attrs={"placeholder": "server default", "autocomplete": "off"}),
    )
    llm_api_key = forms.CharField(
        label="Endpoint API key",
        max_length=500,
        required=False,
        strip=True,
        help_text="Stored encrypted and never shown again. Empty = keep the saved key.",
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    llm_api_key_clear = forms.BooleanField(label="Remove the saved endpoint key", required=False)
    planner_model = forms.CharField(
        label="Planner's model", max_length=100, required=False, help_text="Empty = the project's model."
    )
    coder_model = forms.CharField(
        label="Coder's model", max_length=100, required=False, help_text="Empty = the project's model."
    )
    reviewer_model = forms.CharField(
        label="Reviewer's model", max_length=100, required=False, help_text="Empty = the project's model."
    )
    llm_max_tokens = forms.IntegerField(
        label="Max tokens per call", required=False, min_value=1, max_value=128_000, help_text="Empty = default."
    )
    token_budget = forms.IntegerField(
        label="Token budget per run",
        required=False,
        min_value=1000,
        max_value=100_000_000,
        help_text="A run pauses before a call could take it past this. Empty = default.",
    )
    instructions = forms.CharField(
        label="Instructions for the agents",
        max_length=INSTRUCTIONS_MAX_LENGTH,
        required=False,
        help_text="Added to every agent's system prompt, after the repository's AGENTS.md or CLAUDE.md.",
        widget=forms.Textarea(attrs={"rows": 6, "placeholder": "e.g. Use type hints; never touch migrations/."}),
    )
    learn_distil = forms.BooleanField(
        label="Distil lessons with the model",
        required=False,
        initial=True,
        help_text=(
            "When a run ends or waits for you, one short call of the project's model turns its review findings "
            "and your requests for changes into at most three lessons (its cost is on the run). "
            "Off: they are kept word for word."
        ),
    )
    lesson_half_life_hours = forms.FloatField(
        label="Half-life of review lessons (hours)",
        required=False,
        min_value=1,
        max_value=LESSON_HALF_LIFE_MAX_HOURS,
        help_text="How fast a lesson from a review finding fades unless it is used again. Empty = server default.",
    )
    runs_at_once = forms.IntegerField(
        label="Runs at once",
        required=False,
        min_value=1,
        max_value=RUNS_AT_ONCE_MAX,
        help_text="How many of this project's runs may work at once; more wait in line. Empty = server default.",
    )
    task_spend_ceiling_usd = forms.DecimalField(
        label="Spending ceiling per task (USD)",
        required=False,
        min_value=Decimal("0"),
        max_value=TASK_SPEND_CEILING_MAX_USD,
        max_digits=10,
        decimal_places=2,
        help_text=TASK_SPEND_CEILING_HELP + " Empty = server default; 0 = no ceiling.",
    )

    # Empty: the built-in Coder (core/coder_agents.py); choices read when the form is made.
    coder_agent = forms.ChoiceField(
        label="Coder",
        required=False,
        help_text="Who edits the code: the built-in Coder, or a coding agent over ACP installed on the server. "
        "A task may pick its own.",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # The service's key: None keeps the saved one, "" removes it.
        clear = cleaned.pop("llm_api_key_clear", False)
        cleaned["llm_api_key"] = "" if clear else (cleaned.get("llm_api_key") or None)
        return cleaned

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["coder_agent"]).choices = coder_agent_choices()
        # "Empty = default" names the default: the server's settings, read when the page is.
        defaults = {
            "llm_model": (
                f"Leave empty for the provider's default model: Anthropic's ({settings.LLM_MODEL}), "
                f"the OpenAI-compatible endpoint's ({settings.OPENAI_MODEL})."
            ),
            "llm_base_url": (
                "OpenAI-compatible only, e.g. https://openrouter.ai/api/v1. "
                f"Empty = the server's endpoint ({settings.OPENAI_BASE_URL})."
            ),
            "llm_max_tokens": f"Empty = the server's default, {settings.LLM_MAX_TOKENS:,}.",
            "token_budget": (
                "A run pauses before a call could take it past this. "
                f"Empty = the server's default, {settings.RUN_TOKEN_BUDGET:,} tokens."
            ),
            "lesson_half_life_hours": (
                "How fast a lesson from a review finding fades unless it is used again. "
                f"Empty = the server's default, {settings.MEMORY_DEFAULT_HALF_LIFE_HOURS:,} hours."
            ),
            "runs_at_once": (
                "How many of this project's runs may work at once; more wait in line. "
                f"Empty = the server's default, {settings.RUNS_AT_ONCE_PER_PROJECT}."
            ),
            "task_spend_ceiling_usd": (
                f"{TASK_SPEND_CEILING_HELP} Empty = the server's default, "
                + (f"${settings.TASK_SPEND_CEILING_USD:,.2f}" if settings.TASK_SPEND_CEILING_USD else "no ceiling")
                + "; 0 = no ceiling."
            ),
        }
        for name, text in defaults.items():
            if name in self.fields:
                self.fields[name].help_text = text
