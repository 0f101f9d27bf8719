"""The pipelines' tables, split by subdomain (each module owns its tables): a run and its
records (runs), its life on the forge (forge), comments on lines of its diff
(line_comments)."""

from .forge import ForgeDelivery, ForgeIssue, ForgeIssueState, ForgeReview, ForgeReviewOutcome, PullRequest
from .line_comments import LineCommentAddressed, LineSide, RunLineComment
from .runs import (
    ACTIVE_STATUSES,
    CODER,
    DISTILLER,
    FEEDBACK_LEARNED_FROM,
    FINAL_STATUSES,
    MAX_REVIEW_ITERATIONS,
    PLANNER,
    REVIEWER,
    RUN_CARD_COLUMNS,
    RUN_TRANSITIONS,
    TASK_STATUS_FOR_RUN,
    WORKING_STATUSES,
    AgentCall,
    FeedbackOrigin,
    PipelineRun,
    RunEvent,
    RunMessage,
    RunStatus,
    RunTransition,
)

__all__ = [
    "ACTIVE_STATUSES",
    "CODER",
    "DISTILLER",
    "FEEDBACK_LEARNED_FROM",
    "FINAL_STATUSES",
    "MAX_REVIEW_ITERATIONS",
    "PLANNER",
    "REVIEWER",
    "RUN_CARD_COLUMNS",
    "RUN_TRANSITIONS",
    "TASK_STATUS_FOR_RUN",
    "WORKING_STATUSES",
    "AgentCall",
    "FeedbackOrigin",
    "ForgeDelivery",
    "ForgeIssue",
    "ForgeIssueState",
    "ForgeReview",
    "ForgeReviewOutcome",
    "LineCommentAddressed",
    "LineSide",
    "PipelineRun",
    "PullRequest",
    "RunEvent",
    "RunLineComment",
    "RunMessage",
    "RunStatus",
    "RunTransition",
]
