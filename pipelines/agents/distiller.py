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
from typing import NamedTuple

from django.conf import settings

from llm.providers.base import ProviderError
from pipelines.agents import prompts as agents
from pipelines.agents.conversation import InvalidAgentOutput, call_agent
from pipelines.agents.turns import BudgetExceeded
from pipelines.learning.lessons import Learned, Moment, distilled_citations, lessons_store
from pipelines.models import PipelineRun
from pipelines.runs.ceiling import SpendCeilingReached
from pipelines.runs.leases import Lease

logger = logging.getLogger(__name__)


def learn(run: PipelineRun, lease: Lease, moment: Moment | None) -> Learned | None:
    """Store what ``moment`` teaches, distilled when the project asks for it."""
    if moment is None:
        return None
    texts, distilled, cited = moment.texts, False, None
    lines: list[str] = []
    if run.task.project.learn_distil:
        try:
            answer = call_agent(
                run,
                lease,
                agents.DISTILLER,
                agents.distiller_prompt(
                    title=run.task.title,
                    origin=moment.origin,
                    texts=moment.texts,
                    files=[[c.path for c in moment.citations_of(i)] for i in range(len(moment.texts))],
                ),
                bare=True,
                max_tokens=settings.LEARN_DISTIL_MAX_TOKENS,
            )
            lessons = [distilled_lesson(item) for item in answer.get("lessons", [])]
            texts, lines, distilled = (
                [lesson.text for lesson in lessons],
                [lesson.applies_when for lesson in lessons],
                True,
            )
            cited = distilled_citations(moment, [lesson.files for lesson in lessons])
        except (ProviderError, BudgetExceeded, SpendCeilingReached, InvalidAgentOutput) as exc:
            logger.warning("Run %s: lessons kept as written, the distillation failed: %s", run.pk, exc)
    try:
        return lessons_store(run, moment, texts, distilled=distilled, applies_when=lines, cited=cited)
    except Exception:
        logger.exception("Run %s: could not record what it learned", run.pk)
        return None


class DistilledLesson(NamedTuple):
    text: str
    applies_when: str = ""
    # The files it is about; () for the whole project.
    files: tuple[str, ...] = ()


def distilled_lesson(item: object) -> DistilledLesson:
    """One item of record_lessons: an object with the lesson, when it applies and the
    files it is about, or a bare lesson (no line, the whole project's)."""
    if isinstance(item, dict):
        files = item.get("files")
        return DistilledLesson(
            str(item.get("lesson") or ""),
            str(item.get("applies_when") or ""),
            tuple(str(path) for path in files) if isinstance(files, list) else (),
        )
    return DistilledLesson(str(item))
