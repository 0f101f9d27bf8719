from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api import StrictCharField
from core.coder_agents import CODER_AGENT_MAX_LENGTH, validate_coder_agent
from projects.api.fields import OwnedProjectField
from projects.selectors import project_task_spend_ceiling
from tasks.models import DESCRIPTION_MAX_LENGTH, TITLE_MAX_LENGTH, Task, TaskCategory, TaskPriority, TaskStatus

STATUS_NOT_EDITABLE = "The status changes only through PATCH /api/tasks/{id}/status."
POSITION_NOT_EDITABLE = "The position changes only through PATCH /api/tasks/{id}/status."
PROJECT_NOT_EDITABLE = "A task cannot move to another project."
SEARCH_MAX_LENGTH = 200


@extend_schema_field({"type": "array", "items": {"type": "object", "additionalProperties": True}})
class SubtasksField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True})
class PipelineStateField(serializers.JSONField):
    pass


def _usd_field(help_text: str) -> serializers.DecimalField:
    """An amount in USD as the pipeline keeps it (six decimals), read-only, null when unknown."""
    return serializers.DecimalField(
        max_digits=12, decimal_places=6, read_only=True, allow_null=True, help_text=help_text
    )


class LatestRunSerializer(serializers.Serializer):
    """The task's latest pipeline run, read from its summary (``Task.pipeline_state``,
    kept by the pipeline at every change of the run's status and every agent call it
    pays for): no query per task."""

    id = serializers.IntegerField(source="run_id", help_text="The run's id (`/api/runs/{id}`).")
    number = serializers.IntegerField(source="run_number", help_text="1 for the task's first run, then 2, 3…")
    status = serializers.CharField(
        help_text="queued, planning, preparing, coding, verifying, reviewing, fixing, awaiting_approval, paused, "
        "approved, failed or cancelled (the run's `status`)."
    )
    phase = serializers.CharField(help_text="The working phase it is in, or was in when it paused or ended.")
    cost_usd = _usd_field(
        "What the run's agent calls cost so far, in USD; null for a run summarised before costs were."
    )
    provider = serializers.CharField(
        default="", help_text='Who answers its agents: "anthropic", "openai" (OpenAI-compatible) or "claude-cli".'
    )
    model = serializers.CharField(default="", help_text="The model its agents use.")
    coder_agent = serializers.CharField(
        allow_null=True,
        default=None,
        help_text="The coding agent over ACP that is its Coder ('' for the built-in Coder; null for a run from "
        "before runs recorded it).",
    )


class ForgeIssueSummarySerializer(serializers.Serializer):
    """The forge's issue a task was imported from, read from the task's summary
    (``Task.pipeline_state["forge_issue"]``, kept by the pipeline): no query per task."""

    number = serializers.IntegerField(help_text="The issue's number on the forge (GitLab: its iid).")
    url = serializers.CharField(help_text="The issue's page on the forge.")
    state = serializers.CharField(help_text="open or closed, as the forge last said.")


class TaskSerializer(serializers.ModelSerializer[Task]):
    project = serializers.IntegerField(source="project_id", read_only=True, help_text="The project's id.")
    subtasks = SubtasksField(
        read_only=True, help_text="Ordered subtasks from the Planner: `{id, title, description, order}`."
    )
    pipeline_state = PipelineStateField(
        read_only=True,
        help_text="Summary of the latest pipeline run: `run_id`, `run_number`, `status`, `phase`, `iteration`, "
        "`cost_usd`, `provider`, `model`. `latest_run` gives the same, typed.",
    )
    latest_run = serializers.SerializerMethodField(
        help_text="The latest pipeline run's state and cost; null before the task's first run."
    )
    forge_issue = serializers.SerializerMethodField(
        help_text="The issue on the forge this task was imported from; null for a task made here."
    )
    total_cost = _usd_field("What all the task's pipeline runs cost, in USD; null before its first run.")
    spend_ceiling_usd = serializers.SerializerMethodField(
        help_text="What all the task's runs may spend together, in USD (the project's ceiling, or the server's); "
        "null: no ceiling. Its runs pause once `total_cost` reaches it."
    )

    class Meta:
        model = Task
        fields = (
            "id",
            "project",
            "title",
            "description",
            "category",
            "priority",
            "status",
            "position",
            "subtasks",
            "pipeline_state",
            "latest_run",
            "forge_issue",
            "total_cost",
            "spend_ceiling_usd",
            "coder_agent",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    @extend_schema_field(serializers.DecimalField(max_digits=10, decimal_places=2, allow_null=True))
    def get_spend_ceiling_usd(self, task: Task) -> str | None:
        ceiling = project_task_spend_ceiling(project=task.project)
        return None if ceiling is None else str(ceiling.quantize(Decimal("0.01")))

    @extend_schema_field(LatestRunSerializer(allow_null=True))
    def get_latest_run(self, task: Task) -> dict[str, Any] | None:
        state = task.pipeline_state
        if not isinstance(state, dict) or "run_id" not in state:
            return None
        return LatestRunSerializer(
            {
                "cost_usd": None,
                "run_number": None,
                "phase": "",
                "provider": "",
                "model": "",
                "coder_agent": None,
                **state,
            }
        ).data

    @extend_schema_field(ForgeIssueSummarySerializer(allow_null=True))
    def get_forge_issue(self, task: Task) -> dict[str, Any] | None:
        state = task.pipeline_state
        issue = state.get("forge_issue") if isinstance(state, dict) else None
        return ForgeIssueSummarySerializer(issue).data if isinstance(issue, dict) else None


class _TaskFieldsSerializer(serializers.Serializer):
    title = StrictCharField(max_length=TITLE_MAX_LENGTH)
    description = StrictCharField(max_length=DESCRIPTION_MAX_LENGTH, allow_blank=True, required=False)
    category = serializers.ChoiceField(choices=TaskCategory.choices, required=False)
    priority = serializers.ChoiceField(choices=TaskPriority.choices, required=False)
    coder_agent = StrictCharField(
        max_length=CODER_AGENT_MAX_LENGTH,
        allow_blank=True,
        required=False,
        validators=[validate_coder_agent],
        help_text="This task's Coder: blank = the project's; `built-in`, or a coding agent over ACP installed on "
        "the server (`ACP_AGENTS`); another name is a 400.",
    )


# Needs ``context={"user": ...}`` to resolve ``project`` among the user's own.
class TaskCreateSerializer(_TaskFieldsSerializer):
    project = OwnedProjectField(
        required=False, help_text="One of your projects; by default your first (oldest) project."
    )


class TaskUpdateSerializer(_TaskFieldsSerializer):
    """PATCH body: any of title, description, category, priority."""

    NOT_EDITABLE = {"status": STATUS_NOT_EDITABLE, "position": POSITION_NOT_EDITABLE, "project": PROJECT_NOT_EDITABLE}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # Silently ignoring these would let a client believe the task moved.
        refused = {field: [message] for field, message in self.NOT_EDITABLE.items() if field in self.initial_data}
        if refused:
            raise serializers.ValidationError(refused)
        return attrs


class TaskMoveSerializer(serializers.Serializer):
    """A move to a column, and optionally to a position in it."""

    # DRF and drf-spectacular mark every PATCH body partial (all fields optional); a
    # move without a status means nothing, so this serializer is never partial.
    @property
    def partial(self) -> bool:
        return False

    @partial.setter
    def partial(self, value: bool) -> None:
        pass

    status = serializers.ChoiceField(choices=TaskStatus.choices, help_text="The column to move to.")
    position = serializers.IntegerField(
        min_value=0, required=False, help_text="Index in the target column, from 0 (default: last)."
    )


class TaskListQuerySerializer(serializers.Serializer):
    project = serializers.IntegerField(required=False, help_text="Only this project's tasks (one of yours).")
    status = serializers.ChoiceField(choices=TaskStatus.choices, required=False, help_text="Only this column.")
    category = serializers.ChoiceField(choices=TaskCategory.choices, required=False)
    q = StrictCharField(
        max_length=SEARCH_MAX_LENGTH, required=False, allow_blank=True, help_text="Text in the title or description."
    )
