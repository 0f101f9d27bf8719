"""Learning inside a phase: the distillation call, then storing (pipelines/learning/lessons.py).

A run learns where its worker already holds the phase: the request for changes when
the Coder starts on it, the fixed findings when the review passes. So a distillation
call is a recorded, costed call of the run like any other (its cost is on the run), it
is bought once even when the phase is redone after a crash (pipelines/runs/recovery.py), and
it stops with the phase. When it cannot be made — the project does not distil, the
budget is spent, the model fails or answers badly — the texts are kept as written:
a lesson is never lost for the want of a summary.
"""

from __future__ import annotations

import logging

from django.conf import settings

from llm.providers.base import ProviderError
from pipelines.agents import prompts as agents
from pipelines.agents.conversation import InvalidAgentOutput, call_agent
from pipelines.agents.turns import BudgetExceeded
from pipelines.learning.lessons import Learned, Moment, lessons_store
from pipelines.models import PipelineRun
from pipelines.runs.leases import Lease

logger = logging.getLogger(__name__)


def learn(run: PipelineRun, lease: Lease, moment: Moment | None) -> Learned | None:
    """Store what ``moment`` teaches, distilled when the project asks for it."""
    if moment is None:
        return None
    texts, distilled = moment.texts, False
    lines: list[str] = []
    if run.task.project.learn_distil:
        try:
            answer = call_agent(
                run,
                lease,
                agents.DISTILLER,
                agents.distiller_prompt(title=run.task.title, origin=moment.origin, texts=moment.texts),
                bare=True,
                max_tokens=settings.LEARN_DISTIL_MAX_TOKENS,
            )
            lessons = [distilled_lesson(item) for item in answer.get("lessons", [])]
            texts, lines, distilled = [text for text, _ in lessons], [line for _, line in lessons], True
        except (ProviderError, BudgetExceeded, InvalidAgentOutput) as exc:
            logger.warning("Run %s: lessons kept as written, the distillation failed: %s", run.pk, exc)
    try:
        return lessons_store(run, moment, texts, distilled=distilled, applies_when=lines)
    except Exception:
        logger.exception("Run %s: could not record what it learned", run.pk)
        return None


def distilled_lesson(item: object) -> tuple[str, str]:
    """(the lesson, when it applies) from one item of record_lessons: an object with
    both, or a bare lesson with no line."""
    if isinstance(item, dict):
        return str(item.get("lesson") or ""), str(item.get("applies_when") or "")
    return str(item), ""
