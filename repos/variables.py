"""A project's variables and secrets for its commands (placeholder until merged)."""

from __future__ import annotations

from projects.models import Project


def project_sandbox_variables(project: Project) -> tuple[tuple[str, str], ...]:
    return ()
