"""A run and what it leaves behind: the agents' names, the run's statuses and the one
table of allowed transitions (with the tuples and maps read from it), the run itself,
its audit rows (RunTransition), its agents' calls, its live events and a person's
messages to its agents."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.coder_agents import CODER_AGENT_MAX_LENGTH
from core.models import TimeStampedModel
from tasks.models import TaskStatus

# The agents of a run, by the name their calls, live logs, memories and notes carry.
PLANNER = "planner"
CODER = "coder"
REVIEWER = "reviewer"
# Not one of the team: the short call that turns a run's findings and feedback into
# lessons (pipelines/agents/distiller.py).
DISTILLER = "distiller"


class FeedbackOrigin(models.TextChoices):
    """Who asked for the changes a run works on: a person here, or the run's pull request
    on the forge (pipelines.pull_requests.rounds)."""

    PERSON = "person", "the person reviewing"
    FORGE_REVIEW = "forge_review", "a review on the forge"
    CHECKS = "checks", "the pull request's checks"
    BASE = "base", "the base branch, which moved"


# People's words teach lessons; a CI log or a merge of the base is no one's advice.
FEEDBACK_LEARNED_FROM = (FeedbackOrigin.PERSON, FeedbackOrigin.FORGE_REVIEW)


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    PLANNING = "planning", "Planning"
    PREPARING = "preparing", "Preparing environment"
    CODING = "coding", "Coding"
    VERIFYING = "verifying", "Verifying"
    REVIEWING = "reviewing", "Reviewing"
    FIXING = "fixing", "Fixing"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    PAUSED = "paused", "Paused"
    APPROVED = "approved", "Approved"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# Phases a worker executes, in pipeline order.
WORKING_STATUSES = (
    RunStatus.PLANNING,
    RunStatus.PREPARING,
    RunStatus.CODING,
    RunStatus.VERIFYING,
    RunStatus.REVIEWING,
    RunStatus.FIXING,
)
# A run in one of these owns its task: at most one per task (database constraint).
ACTIVE_STATUSES = (RunStatus.QUEUED, *WORKING_STATUSES, RunStatus.AWAITING_APPROVAL, RunStatus.PAUSED)
FINAL_STATUSES = (RunStatus.APPROVED, RunStatus.FAILED, RunStatus.CANCELLED)

# The one table of allowed run transitions (docs/ARCHITECTURE.md, A run's states). Only
# pipelines.runs.services.run_transition changes a run's status, and only along these.
RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.QUEUED: frozenset({RunStatus.PLANNING, RunStatus.CANCELLED, RunStatus.FAILED}),
    # Planning goes through preparing when the repository has an environment to make
    # ready or a test command to run on the base (repos/environments/).
    RunStatus.PLANNING: frozenset(
        {RunStatus.PREPARING, RunStatus.CODING, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    RunStatus.PREPARING: frozenset({RunStatus.CODING, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED}),
    # Coding and fixing go through verifying when the project has a test command.
    RunStatus.CODING: frozenset(
        {RunStatus.VERIFYING, RunStatus.REVIEWING, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    RunStatus.VERIFYING: frozenset({RunStatus.REVIEWING, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.REVIEWING: frozenset(
        {RunStatus.AWAITING_APPROVAL, RunStatus.FIXING, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    RunStatus.FIXING: frozenset(
        {RunStatus.VERIFYING, RunStatus.REVIEWING, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    # Verifying or reviewing again when the base moved on and was merged in cleanly
    # (pipelines/runs/base_update.py): a merged base is tested before it is approved.
    RunStatus.AWAITING_APPROVAL: frozenset(
        {RunStatus.APPROVED, RunStatus.CODING, RunStatus.VERIFYING, RunStatus.REVIEWING, RunStatus.CANCELLED}
    ),
    # A paused run resumes the phase it was paused in (run.phase).
    RunStatus.PAUSED: frozenset({*WORKING_STATUSES, RunStatus.CANCELLED, RunStatus.FAILED}),
    RunStatus.APPROVED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

# The board column a task shows while its run is in a status.
TASK_STATUS_FOR_RUN: dict[str, str] = {
    RunStatus.PLANNING: "spec",
    RunStatus.PREPARING: "building",
    RunStatus.CODING: "building",
    RunStatus.FIXING: "building",
    RunStatus.VERIFYING: "building",
    RunStatus.REVIEWING: "building",
    RunStatus.AWAITING_APPROVAL: "review",
    RunStatus.APPROVED: "done",
}
# The columns a run moves its card through while it is active. A run that ends failed or
# cancelled takes its card back to the column it was started from only from one of these:
# a card a person has meanwhile moved to Backlog or Done stays where they put it.
RUN_CARD_COLUMNS = frozenset(TASK_STATUS_FOR_RUN[status] for status in ACTIVE_STATUSES if status in TASK_STATUS_FOR_RUN)

MAX_REVIEW_ITERATIONS = 3


class PipelineRun(TimeStampedModel):
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="runs")
    number = models.PositiveIntegerField(help_text="1 for a task's first run, then 2, 3…")
    status = models.CharField(max_length=24, choices=RunStatus.choices, default=RunStatus.QUEUED)
    # The working phase the run is in, or was in when it paused: Retry resumes it.
    phase = models.CharField(max_length=24, choices=RunStatus.choices, default=RunStatus.PLANNING)
    iteration = models.PositiveSmallIntegerField(default=0, help_text="Reviews done so far.")
    plan = models.JSONField(default=list, blank=True)
    file_changes = models.JSONField(default=list, blank=True)
    review_findings = models.JSONField(default=list, blank=True, help_text="Findings of the latest review.")
    review_history = models.JSONField(default=list, blank=True, help_text="One entry per review iteration.")
    feedback = models.TextField(blank=True, help_text="The person's requested changes, for the Coder.")
    feedback_origin = models.CharField(max_length=16, choices=FeedbackOrigin.choices, default=FeedbackOrigin.PERSON)
    # Changes the Coder submitted that could not be applied to the worktree (a create of
    # an existing file, say): findings for the next review, never applied blindly.
    change_problems = models.JSONField(default=list, blank=True)
    # What the Coder's own conversation reports for the next review (it ran out of turns
    # or tokens): the review still runs the tests and the Reviewer, and adds these.
    coder_findings = models.JSONField(default=list, blank=True)
    # The plan subtask (its ``order``) the Coder said it is working on; cleared by every
    # change of status, so it is only ever set while the run is coding or fixing.
    current_subtask = models.PositiveSmallIntegerField(null=True, blank=True)
    # What the run taught the team (pipelines/learning/lessons.py): one entry per moment it
    # learned at (a request for changes, a review round fixed, its approval), naming the
    # memories written or reinforced. Its keys keep a phase done twice from learning twice.
    lessons = models.JSONField(default=list, blank=True)
    # Working on a linked repository: the run's own branch and git worktree.
    branch = models.CharField(max_length=255, blank=True)
    worktree_path = models.CharField(max_length=1000, blank=True)
    base_commit = models.CharField(max_length=64, blank=True, help_text="Where the branch started.")
    head_commit = models.CharField(max_length=64, blank=True, help_text="The branch's latest commit.")
    worktree_removed_at = models.DateTimeField(null=True, blank=True)
    branch_discarded_at = models.DateTimeField(null=True, blank=True)
    # The project's test command in the worktree: {passed, exit_code, timed_out, output, …}.
    verify_result = models.JSONField(null=True, blank=True)
    # The run's environment (repos/environments/): {key, source, prepared, restored_ms,
    # base_tests: {passed, failing_tests, …}} once preparing is done.
    environment = models.JSONField(null=True, blank=True)
    # Why the run is paused when a person must act first: "environment_broken" (setup
    # failed or the test command cannot start; Retry prepares again, no fix round spent).
    pause_kind = models.CharField(max_length=32, blank=True)
    # Paths the Coder wrote through its tools (relative to the worktree): new files are
    # committed only when it wrote them; anything else new is listed in ``left_out``.
    written_paths = models.JSONField(default=list, blank=True)
    left_out = models.JSONField(default=list, blank=True, help_text="Files changed in the worktree but not committed.")
    # The last attempt to merge on approval: {merged, commit, conflicts, message}.
    merge_result = models.JSONField(null=True, blank=True)
    # Each time the base moved on and was taken into the branch (pipelines/runs/base_update.py):
    # {how, base_commit, old_head, merged_head, conflicts: [paths], round, via, at}.
    base_updates = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    error_retryable = models.BooleanField(default=False)
    provider = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=100, blank=True)
    # A project's own OpenAI-compatible endpoint the run's calls go to (empty: the server's).
    endpoint = models.CharField(max_length=500, blank=True)
    # The project's per-agent models when the run started ({"coder": "…"}); an agent
    # not named uses ``model`` (``model_for``).
    agent_models = models.JSONField(default=dict, blank=True)
    # NULL, not '': '' is the built-in Coder, NULL a run from before runs recorded theirs
    # (it has its task's choice as it is now: core.coder_agents.run_coder_agent).
    coder_agent = models.CharField(  # noqa: DJ001
        max_length=CODER_AGENT_MAX_LENGTH,
        null=True,
        blank=True,
        help_text="The coding agent over ACP that is the run's Coder, chosen when it started ('' for the "
        "built-in Coder; null for a run from before runs recorded it).",
    )
    max_tokens = models.PositiveIntegerField(default=0)
    token_budget = models.PositiveIntegerField(default=0, help_text="0 = no limit.")
    # Every input token of the run's calls, cache writes and reads included (the token
    # budget counts them all); the two cache counts are the part of it that was cached.
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_creation_input_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_input_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    # A key given with the start request, encrypted; never stored or logged in plain text.
    api_key_encrypted = models.TextField(blank=True, editable=False)
    # Lease of the worker executing the current phase: a sweeper re-queues a working run
    # whose lease ran out (the worker died), and a second worker cannot take a leased run.
    lease_owner = models.CharField(max_length=64, blank=True, editable=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # The board column the task was in when the run was started: a run that fails or is
    # cancelled returns the card there (pipelines.runs.services.run_transition). Blank for runs
    # started before it was recorded: their card stays where the run left it.
    started_from_column = models.CharField(max_length=16, choices=TaskStatus.choices, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["task"],
                condition=Q(status__in=[str(status) for status in ACTIVE_STATUSES]),
                name="pipelines_one_active_run_per_task",
            ),
            models.UniqueConstraint(fields=["task", "number"], name="pipelines_run_number_unique"),
        ]
        indexes = [models.Index(fields=["status", "lease_expires_at"])]

    def model_for(self, agent: str) -> str:
        """The model ``agent``'s calls use: the project's choice for it when the run
        started, else the run's model."""
        chosen = self.agent_models.get(agent) if isinstance(self.agent_models, dict) else None
        return str(chosen or self.model)

    def __str__(self) -> str:
        return f"Run {self.number} of task {self.task_id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class RunTransition(models.Model):
    """Audit row: one per status change of a run, written in the same transaction."""

    run = models.ForeignKey(PipelineRun, on_delete=models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=24, choices=RunStatus.choices)
    to_status = models.CharField(max_length=24, choices=RunStatus.choices)
    reason = models.CharField(max_length=500, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.from_status} → {self.to_status}"


class AgentCall(models.Model):
    """One LLM call by an agent: what it cost and what came back (the transcript)."""

    class Outcome(models.TextChoices):
        OK = "ok", "OK"
        INVALID = "invalid", "Invalid output"
        ERROR = "error", "Error"
        CANCELLED = "cancelled", "Cancelled"

    run = models.ForeignKey(PipelineRun, on_delete=models.CASCADE, related_name="agent_calls")
    agent = models.CharField(max_length=32)
    phase = models.CharField(max_length=24, choices=RunStatus.choices)
    iteration = models.PositiveSmallIntegerField(default=0)
    attempt = models.PositiveSmallIntegerField(default=1)
    model = models.CharField(max_length=100, blank=True)
    prompt = models.TextField(blank=True)
    response_text = models.TextField(blank=True)
    tool_input = models.JSONField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.OK)
    error = models.TextField(blank=True)
    # As the API reports them: ``input_tokens`` is the uncached part of the input, the
    # prompt-caching writes and reads are beside it.
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_creation_input_tokens = models.PositiveIntegerField(default=0)
    cache_read_input_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    duration_ms = models.PositiveIntegerField(default=0)
    # The transition that entered the phase this call was bought in, and the reply as
    # the pipeline took it: a phase resumed after its worker died reuses the replies it
    # already bought instead of buying them again (recovery.BoughtCalls).
    phase_entry = models.ForeignKey(RunTransition, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    response = models.JSONField(null=True, blank=True, editable=False)
    # What the call was given from memory (pipelines.agents.recall): {"memories": [{"id",
    # "content", "score"}], "notes": {"agent_id", "chars", "cut"} or null}.
    recalled = models.JSONField(default=dict, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.agent} ({self.phase}, {self.outcome})"


class RunEvent(models.Model):
    """A live event, persisted so a page opened mid-run can replay everything so far.

    The primary key is the event's sequence number (SSE ``id``); a task has one
    active run at a time and that run's events are written by one worker in order,
    so ids grow in the order a client must see them.
    """

    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="events")
    run = models.ForeignKey(PipelineRun, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=32)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["task", "id"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.type}"


class RunMessage(models.Model):
    """A person's message to a run's agents: the agent working reads it at its next turn
    (the Coder, or the Planner or Reviewer at its next call).

    Delivered once, at a turn of a phase entry (``delivered_entry``, ``delivered_turn``,
    ``delivered_agent``): a phase resumed after its worker died hands the agent the same
    messages at the same turn, so the replies already bought are reused and nothing is
    read twice or lost.
    """

    run = models.ForeignKey(PipelineRun, on_delete=models.CASCADE, related_name="messages")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # Who read it (the agent, its phase) at which turn of the phase entered by the
    # transition ``delivered_entry`` (RunTransition).
    delivered_entry = models.BigIntegerField(null=True, blank=True)
    delivered_turn = models.PositiveIntegerField(null=True, blank=True)
    delivered_phase = models.CharField(max_length=32, blank=True)
    delivered_agent = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["run", "delivered_at"], name="pipelines_message_pending")]

    def __str__(self) -> str:
        return f"Message {self.pk} to run {self.run_id}"
