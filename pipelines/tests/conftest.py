"""A linked calc repository (real git, in tmp_path) and a task to run on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.tests.repositories import CALC_FILES, committed_repository
from repos.models import Repository
from repos.services import repository_link
from tasks.models import Task
from tests.factories import TaskFactory


@pytest.fixture
def repo_files() -> dict[str, str | bytes]:
    """The linked repository's files; a module overrides this to add its own."""
    return CALC_FILES


@pytest.fixture
def repo_root(tmp_path: Path, repo_files: dict[str, str | bytes]) -> Path:
    return committed_repository(tmp_path / "repos" / "calc", repo_files)


@pytest.fixture
def linked(project, repo_root: Path) -> Repository:
    return repository_link(project=project, path=str(repo_root))


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Make add add", description="add(2, 3) should be 5")
