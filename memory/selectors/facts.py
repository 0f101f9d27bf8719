from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accounts.models import User
    from projects.models import Project


def memory_prompt_context(*, user: User, project: Project | None = None) -> str:
    """The memory block that goes into every agent prompt (facts and goals).

    The seam the pipeline calls today; the memory issue fills it in. Empty string
    when there is nothing to remember.
    """
    return ""
