from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api import StrictCharField
from pipelines.messages.selectors import run_message_note
from pipelines.messages.services import RUN_MESSAGE_MAX_LENGTH
from pipelines.models import (
    LineCommentAddressed,
    LineSide,
    PipelineRun,
    PullRequest,
    RunLineComment,
    RunMessage,
    RunStatus,
)
from pipelines.review.services import LINE_COMMENT_BODY_MAX_LENGTH
from pipelines.runs.ceiling import task_spend_against_ceiling
from pipelines.runs.places import run_queue_position
from pipelines.runs.selectors import run_allowed_actions, run_recalled


class RunSerializer(serializers.ModelSerializer[PipelineRun]):
    task = serializers.IntegerField(source="task_id", read_only=True)
    total_tokens = serializers.IntegerField(read_only=True)
    cost_usd = serializers.DecimalField(max_digits=12, decimal_places=6, read_only=True)
    allowed_actions = serializers.SerializerMethodField()
    queue_position = serializers.SerializerMethodField(
        help_text="While the run waits queued: its place among its owner's queued runs, oldest first (1 = next); "
        "else null. Runs over the limits on runs at once (per user, per project) wait."
    )
    demo = serializers.SerializerMethodField()
    task_spend = serializers.SerializerMethodField(
        help_text="What the run's task has spent over all its runs against its spending ceiling (the project's "
        "setting): spent_usd, ceiling_usd (null: no ceiling), reached. A run pauses (pause_kind spend_ceiling) "
        "before another round or call once it is reached."
    )
    recalled = serializers.SerializerMethodField(
        help_text=(
            "Per agent: the memories its calls were given (id, content, best score, calls; where each came "
            "from: source, source_run_id, source_label, source_note, and deleted when a person deleted it "
            "since) and its notes (agent_id, chars given, cut, given: which notes — global, project —, project_id)."
        )
    )

    lessons = serializers.JSONField(
        read_only=True,
        help_text=(
            "What the run taught, one entry per moment (kind feedback, findings or approval): the memories "
            "written or reinforced (id, agent, content, how), whether they were distilled, the approval's note."
        ),
    )

    environment = serializers.JSONField(
        read_only=True,
        help_text=(
            "The environment the run's commands ran in, once prepared: key, source (which setup script), "
            "prepared_id, prepared_now, paths restored, restore_ms, and base_tests (the test command on the base "
            "commit: passed, exit_code, failing_tests, ran_now)."
        ),
    )
    left_out = serializers.JSONField(
        read_only=True,
        help_text=(
            "New paths in the worktree that the last commit left out (the Coder did not write them: test "
            "reports, build output, nested repositories): each {path}, a folder {path: 'dir/', files, capped?, "
            "repository?}; a last {path: '', more} when the list was cut."
        ),
    )
    written_paths = serializers.JSONField(
        read_only=True, help_text="The paths the Coder wrote with its tools, relative to the repository."
    )

    class Meta:
        model = PipelineRun
        fields = [
            "id",
            "task",
            "number",
            "status",
            "phase",
            "pause_kind",
            "environment",
            "iteration",
            "plan",
            "file_changes",
            "left_out",
            "written_paths",
            "review_findings",
            "review_history",
            "change_problems",
            "coder_findings",
            "current_subtask",
            "feedback",
            "feedback_origin",
            "base_updates",
            "branch",
            "base_commit",
            "head_commit",
            "worktree_removed_at",
            "branch_discarded_at",
            "verify_result",
            "merge_result",
            "error",
            "error_retryable",
            "provider",
            "model",
            "coder_agent",
            "demo",
            "max_tokens",
            "token_budget",
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "total_tokens",
            "cost_usd",
            "task_spend",
            "allowed_actions",
            "queue_position",
            "recalled",
            "lessons",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_allowed_actions(self, run: PipelineRun) -> list[str]:
        return run_allowed_actions(run=run)

    def get_queue_position(self, run: PipelineRun) -> int | None:
        return run_queue_position(run_id=run.pk) if run.status == RunStatus.QUEUED else None

    @extend_schema_field(
        {
            "type": "object",
            "properties": {
                "spent_usd": {"type": "string"},
                "ceiling_usd": {"type": "string", "nullable": True},
                "reached": {"type": "boolean"},
            },
        }
    )
    def get_task_spend(self, run: PipelineRun) -> dict[str, Any]:
        return task_spend_against_ceiling(task_id=run.task_id).as_dict()

    def get_recalled(self, run: PipelineRun) -> list[dict[str, Any]]:
        return run_recalled(run=run)

    def get_demo(self, run: PipelineRun) -> bool:
        from django.conf import settings

        return bool(settings.LLM_DEMO_MODE)


class RequestChangesSerializer(serializers.Serializer[Any]):
    feedback = StrictCharField(
        max_length=20_000,
        trim_whitespace=True,
        allow_blank=True,
        required=False,
        default="",
        help_text="What should change. May be empty when the run has pending line comments: they are the request.",
    )


class DiffFileSerializer(serializers.Serializer[Any]):
    path = serializers.CharField()
    action = serializers.CharField()
    language = serializers.CharField()
    added = serializers.IntegerField()
    removed = serializers.IntegerField()
    diff = serializers.CharField(help_text="Unified diff of this file.")


class DiffStatsSerializer(serializers.Serializer[Any]):
    files_changed = serializers.IntegerField()
    lines_added = serializers.IntegerField()
    lines_removed = serializers.IntegerField()


class RejectedPathSerializer(serializers.Serializer[Any]):
    file_path = serializers.CharField()
    reason = serializers.CharField()


class DiffSerializer(serializers.Serializer[Any]):
    files = DiffFileSerializer(many=True)
    tree = serializers.ListField(child=serializers.DictField(), help_text="Folders and files, nested.")
    stats = DiffStatsSerializer()
    rejected = RejectedPathSerializer(many=True, help_text="Changes refused for unsafe paths.")


class PullRequestSerializer(serializers.ModelSerializer[PullRequest]):
    run = serializers.IntegerField(source="run_id", read_only=True)

    class Meta:
        model = PullRequest
        fields = [
            "run",
            "forge_kind",
            "number",
            "url",
            "state",
            "head_branch",
            "base_branch",
            "adopted",
            "pushed_head",
            "error",
            "state_checked_at",
            "checks",
            "checks_head",
            "checks_checked_at",
            "ci_fix_rounds",
            "merge_when_green_at",
            "created_at",
        ]
        read_only_fields = fields


# The largest line number the database stores (a PositiveIntegerField on every database):
# a bigger one is a 400, not an overflow.
LINE_NUMBER_MAX = 2_147_483_647


class LineCommentSerializer(serializers.ModelSerializer[RunLineComment]):
    lines = serializers.CharField(source="lines_label", read_only=True, help_text='"7" or "7–9".')
    author = serializers.SerializerMethodField(help_text="The email of who wrote it (null once they are deleted).")
    pending = serializers.SerializerMethodField(help_text="Not sent yet: it can still be edited or deleted.")
    addressed = serializers.SerializerMethodField(
        help_text="What the Coder's round did about it, read from git once the round committed: `changed` (the "
        "round edited or removed its lines, or removed or moved its file), `explained` (its lines left as they "
        "were, and the Coder said why: `reply`), `unchanged` (left as they were, nothing said); null until then, "
        "and for comments sent before rounds were checked. A fix round after the request is judged again."
    )

    class Meta:
        model = RunLineComment
        fields = [
            "id",
            "path",
            "line_start",
            "line_end",
            "side",
            "lines",
            "quote",
            "body",
            "author",
            "pending",
            "feedback_round",
            "sent_at",
            "made_on_commit",
            "addressed",
            "reply",
            "judged_at_commit",
            "forge_author",
            "forge_replied_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "feedback_round": {
                "help_text": "Which request for changes sent it to the Coder (1 = the run's first); "
                "null while pending. Whether the Coder's round changed its lines: `addressed`."
            },
            "made_on_commit": {"help_text": "The run's head commit whose lines the comment numbers."},
            "reply": {"help_text": "What the Coder said about the comment ('' when it said nothing)."},
            "judged_at_commit": {"help_text": "The round's head commit `addressed` was judged at ('' until then)."},
            "quote": {"help_text": "The commented lines of the new file, as they read when it was written."},
            "forge_author": {"help_text": "A review's comment on the forge: its author's login there ('' otherwise)."},
            "forge_replied_at": {"help_text": "When AutoCoder answered it on the forge's thread (null until then)."},
        }

    def get_author(self, comment: RunLineComment) -> str | None:
        return comment.author.email if comment.author else None

    def get_pending(self, comment: RunLineComment) -> bool:
        return comment.feedback_round is None

    @extend_schema_field({"type": "string", "enum": [*LineCommentAddressed.values, None], "nullable": True})
    def get_addressed(self, comment: RunLineComment) -> str | None:
        return comment.addressed or None


class LineCommentCreateSerializer(serializers.Serializer[Any]):
    path = StrictCharField(max_length=1000, help_text="A file of the run's diff, as the diff names it.")
    line_start = serializers.IntegerField(
        min_value=1,
        max_value=LINE_NUMBER_MAX,
        help_text="First line, numbered as in the new file (side old: as in the old file).",
    )
    line_end = serializers.IntegerField(
        min_value=1,
        max_value=LINE_NUMBER_MAX,
        required=False,
        allow_null=True,
        help_text="Last line of a range (default: line_start). Every line must be in the file's changed hunks "
        "(with side old: among the lines the change removed).",
    )
    body = StrictCharField(max_length=LINE_COMMENT_BODY_MAX_LENGTH, trim_whitespace=True)
    side = serializers.ChoiceField(
        choices=LineSide.choices,
        default=LineSide.NEW,
        help_text="new (default): lines of the new file; old: lines the change removed, numbered as in the old file.",
    )


class LineCommentUpdateSerializer(serializers.Serializer[Any]):
    body = StrictCharField(max_length=LINE_COMMENT_BODY_MAX_LENGTH, trim_whitespace=True)


class RunMessageSerializer(serializers.ModelSerializer[RunMessage]):
    author = serializers.SerializerMethodField(help_text="The email of who sent it (null once they are deleted).")
    delivered = serializers.SerializerMethodField(help_text="An agent has read it.")
    note = serializers.SerializerMethodField(
        help_text="Who read it, or when it will be read: a message the Claude CLI's Coder cannot take mid-call "
        "waits for its next round."
    )

    class Meta:
        model = RunMessage
        fields = [
            "id",
            "body",
            "author",
            "created_at",
            "delivered",
            "delivered_at",
            "delivered_agent",
            "delivered_phase",
            "delivered_turn",
            "note",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "delivered_agent": {"help_text": "The agent that read it (planner, coder, reviewer); '' while waiting."},
            "delivered_phase": {"help_text": "The phase it was read in; '' while waiting."},
            "delivered_turn": {"help_text": "The agent's turn in that phase it was read at (0: the first)."},
        }

    def get_author(self, message: RunMessage) -> str | None:
        return message.author.email if message.author else None

    def get_delivered(self, message: RunMessage) -> bool:
        return message.delivered_at is not None

    def get_note(self, message: RunMessage) -> str:
        return run_message_note(message=message)


class RunMessageCreateSerializer(serializers.Serializer[Any]):
    body = StrictCharField(
        max_length=RUN_MESSAGE_MAX_LENGTH,
        trim_whitespace=True,
        help_text="What the agents should know: the agent at work reads it at its next turn (the run's next "
        "round if it is not working).",
    )
