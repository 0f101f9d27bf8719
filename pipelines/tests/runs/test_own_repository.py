"""A project that links no repository gets its own, so every run works in a worktree:
the empty repository is made on the first run's need, runs branch from its ``main``,
approval merges into it, and the project's Repository page shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.models import RunStatus
from pipelines.review.services import run_approve
from pipelines.runs.services import run_start
from pipelines.tests.repositories import git, git_commit
from repos.models import Repository, RepositoryFolder
from repos.services import (
    OWN_REPOSITORY_START,
    _create_empty_repository,
    own_repository_path,
    repository_ensure,
    repository_unlink,
)
from tests.factories import TaskFactory
from tests.fake_anthropic import ToolReply, coder_creates
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Add x", "description": "x = 1", "order": 1}]}
PASS = {"pass": True, "findings": []}


def test_a_project_without_a_repository_gets_its_own_and_each_run_is_a_branch_of_it(
    fake_llm, project, owner, client
) -> None:
    assert not Repository.objects.filter(project=project).exists()
    fake_llm.script(ToolReply(input=PLAN), *coder_creates("app/x.py", "x = 1\n"), ToolReply(input=PASS))
    first = drive_in_process(run_start(task=TaskFactory(project=project, title="Add x"), user=owner))
    assert first.status == RunStatus.AWAITING_APPROVAL

    repository = Repository.objects.get(project=project)
    root = Path(repository.path)
    assert root == own_repository_path(project) and repository.base_branch == "main"
    assert repository.origin_url == "" and repository.status == "ready"
    assert RepositoryFolder.objects.get(path=repository.path).owner == owner
    # An empty start, and the run's change is its branch's diff against it.
    assert git(root, "log", "--format=%s", "main").splitlines() == [OWN_REPOSITORY_START]
    assert git(root, "diff", "--name-only", f"main..{first.branch}") == "app/x.py"
    assert first.base_commit == git(root, "rev-parse", "main")

    client.force_login(owner)
    page = client.get(f"/projects/{project.pk}/repository").content.decode()
    assert f"project-{project.pk}" in page

    run_approve(run=first, actor=owner)
    assert git(root, "show", "main:app/x.py") == "x = 1"

    # The next run branches from the main the first one merged into.
    fake_llm.script(ToolReply(input=PLAN), *coder_creates("app/y.py", "y = 2\n"), ToolReply(input=PASS))
    second = drive_in_process(run_start(task=TaskFactory(project=project, title="Add y"), user=owner))
    assert Repository.objects.filter(project=project).count() == 1
    assert second.base_commit == git(root, "rev-parse", "main")
    assert git(root, "diff", "--name-only", f"main..{second.branch}") == "app/y.py"


def test_an_unlinked_own_repository_is_found_again_with_its_history(project) -> None:
    repository = repository_ensure(project=project)
    assert repository_ensure(project=project).pk == repository.pk  # idempotent
    root = Path(repository.path)
    git_commit(root, "Mine", "--allow-empty")
    repository_unlink(repository=repository)

    again = repository_ensure(project=project)
    assert again.pk != repository.pk and Path(again.path) == root
    assert git(root, "log", "--format=%s", "main").splitlines() == ["Mine", OWN_REPOSITORY_START]


def test_two_makers_of_the_same_repository_leave_one(tmp_path: Path) -> None:
    # A second run that raced the first to make it finds the folder there and keeps it.
    destination = tmp_path / "repos" / "users" / "1" / "project-1"
    _create_empty_repository(destination)
    start = git(destination, "rev-parse", "main")
    _create_empty_repository(destination)
    assert git(destination, "rev-parse", "main") == start
    assert [path.name for path in destination.parent.iterdir()] == ["project-1"]  # no staging left behind


def test_an_own_folder_that_is_not_a_repository_pauses_the_run_saying_why(fake_llm, project, owner) -> None:
    own = own_repository_path(project)
    own.mkdir(parents=True)
    (own / "notes.txt").write_text("someone put this here by hand\n")
    run = drive_in_process(run_start(task=TaskFactory(project=project), user=owner))
    assert run.status == RunStatus.PAUSED
    assert run.error.startswith(f"The project's own repository (users/{owner.pk}/project-{project.pk}) is not usable")
    assert not Repository.objects.filter(project=project).exists()
    assert len(fake_llm.requests) == 0, "nothing was bought"
