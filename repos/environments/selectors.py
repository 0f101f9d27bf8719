"""What the Repository page and the API show of a repository's environment."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..git import GitError
from ..models import PreparedEnvironment, PreparedEnvironmentStatus, Repository, RepositoryStatus
from .scripts import SetupScript

RECENT = 5


@dataclass
class EnvironmentOverview:
    in_force: SetupScript | None
    key: str
    base_commit: str
    current: PreparedEnvironment | None
    recent: list[PreparedEnvironment] = field(default_factory=list)
    error: str = ""

    @property
    def preparing(self) -> bool:
        return any(item.status == PreparedEnvironmentStatus.PREPARING for item in self.recent)


def environment_overview(*, repository: Repository) -> EnvironmentOverview:
    """The setup script in force at the base branch's head, its key, the kept
    environment for it (if any), and the latest preparations."""
    from ..services.branches import base_branch_head
    from .services.ready import environment_in_force

    recent = list(PreparedEnvironment.objects.filter(repository=repository).order_by("-updated_at")[:RECENT])
    if repository.status != RepositoryStatus.READY:
        return EnvironmentOverview(None, "", "", None, recent)
    try:
        commit = base_branch_head(repository=repository)
        script, key, _ = environment_in_force(repository=repository, commit=commit)
    except GitError as exc:
        return EnvironmentOverview(None, "", "", None, recent, error=exc.message)
    current = next((item for item in recent if item.key == key), None) if key else None
    if key and current is None:
        current = PreparedEnvironment.objects.filter(repository=repository, key=key).first()
    return EnvironmentOverview(script, key, commit, current, recent)
