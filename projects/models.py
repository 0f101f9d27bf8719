from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Lower

from core.coder_agents import CODER_AGENT_MAX_LENGTH, validate_coder_agent
from core.models import TimeStampedModel

PROJECT_NAME_MAX_LENGTH = 100
DEFAULT_PROJECT_NAME = "My first project"
INSTRUCTIONS_MAX_LENGTH = 20_000
LESSON_HALF_LIFE_MAX_HOURS = 100_000  # about eleven years
RUNS_AT_ONCE_MAX = 50
TASK_SPEND_CEILING_MAX_USD = Decimal("1000000")
LLM_BASE_URL_MAX_LENGTH = 500


class LlmProvider(models.TextChoices):
    """Who answers a project's agents (the values are llm.providers' names)."""

    SERVER_DEFAULT = "", "Server default"
    ANTHROPIC = "anthropic", "Anthropic"
    OPENAI = "openai", "OpenAI-compatible"


class Project(TimeStampedModel):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=PROJECT_NAME_MAX_LENGTH)
    description = models.TextField(blank=True, max_length=2000)
    # Overrides of the server's LLM settings for this project's runs (empty = default).
    llm_model = models.CharField("model", max_length=100, blank=True, help_text="e.g. claude-sonnet-4-6")
    # Per agent, over ``llm_model`` (empty = the project's model).
    planner_model = models.CharField("Planner's model", max_length=100, blank=True)
    coder_model = models.CharField("Coder's model", max_length=100, blank=True)
    reviewer_model = models.CharField("Reviewer's model", max_length=100, blank=True)
    llm_provider = models.CharField(
        "model provider", max_length=16, blank=True, choices=LlmProvider.choices, default=LlmProvider.SERVER_DEFAULT
    )
    # The project's own OpenAI-compatible endpoint (empty = the server's OPENAI_BASE_URL);
    # its host is checked like a forge's (projects/services.py) and at every call.
    llm_base_url = models.CharField("endpoint base URL", max_length=LLM_BASE_URL_MAX_LENGTH, blank=True)
    # Its key, encrypted (core/crypto.py); never shown back.
    llm_api_key_encrypted = models.TextField(blank=True, editable=False)
    llm_max_tokens = models.PositiveIntegerField(
        "max tokens per call",
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(128_000)],
    )
    token_budget = models.PositiveIntegerField(
        "token budget per run",
        null=True,
        blank=True,
        validators=[MinValueValidator(1000), MaxValueValidator(100_000_000)],
        help_text="A run pauses before a call could take it past this many tokens.",
    )
    # Added to every agent's system prompt, after the repository's AGENTS.md/CLAUDE.md.
    instructions = models.TextField(
        blank=True,
        max_length=INSTRUCTIONS_MAX_LENGTH,
        help_text="Conventions and rules for the agents; added to every agent's system prompt.",
    )
    # What runs teach (pipelines/agents/distiller.py): distilled by one short call of the
    # project's model, or stored as the person and the Reviewer wrote it.
    learn_distil = models.BooleanField(
        "distil lessons with the model",
        default=True,
        help_text="One short call of the project's model turns a run's findings and feedback into at most 3 lessons.",
    )
    lesson_half_life_hours = models.FloatField(
        "half-life of review lessons (hours)",
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(LESSON_HALF_LIFE_MAX_HOURS)],
        help_text="How fast a lesson from a review finding fades. Empty = the server's default.",
    )
    # Its runs working at once (pipelines/runs/places.py); empty = RUNS_AT_ONCE_PER_PROJECT.
    runs_at_once = models.PositiveSmallIntegerField(
        "runs at once",
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(RUNS_AT_ONCE_MAX)],
        help_text="How many of this project's runs may work at once; more wait queued. Empty = the server's default.",
    )
    # What one task's runs may spend together, every round of every run (projects.selectors
    # ``project_task_spend_ceiling``; pipelines/runs/ceiling.py pauses a run that reached it).
    task_spend_ceiling_usd = models.DecimalField(
        "spending ceiling per task (USD)",
        max_digits=10,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(TASK_SPEND_CEILING_MAX_USD)],
        help_text="A task's runs pause before another round or call once they have spent this much together. "
        "Empty = the server's default; 0 = no ceiling.",
    )
    # Who edits the code (core/coder_agents.py): empty = the built-in Coder, or an ACP
    # agent of ACP_AGENTS; a task may pick its own.
    coder_agent = models.CharField(
        "Coder",
        max_length=CODER_AGENT_MAX_LENGTH,
        blank=True,
        default="",
        validators=[validate_coder_agent],
        help_text="Empty = the built-in Coder; or a coding agent over ACP installed on the server (ACP_AGENTS).",
    )

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint("owner", Lower("name"), name="projects_project_owner_name_ci_unique"),
        ]

    def __str__(self) -> str:
        return self.name
