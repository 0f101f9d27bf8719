"""A comment on lines becomes a lesson about that file: recalled for a later task that
touches the file and not for one that does not, checked against the base before it is
given, and marked stale (never given again, shown so on the Memory page) once the file
is gone from the base."""

from __future__ import annotations

import pytest

from memory.citations import citations_from_json
from memory.models.semantic import Memory
from pipelines.models import PipelineRun, RunStatus
from pipelines.review.services import line_comment_create, run_approve, run_request_changes
from pipelines.runs.services import run_start
from pipelines.tests.repositories import git, git_commit
from repos.services.reading import branch_changed_paths, commit_contains, files_at_commit
from tests.factories import TaskFactory
from tests.fake_anthropic import TextReply, ToolReply, coder_replaces
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PASS = {"pass": True, "findings": []}
PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "As the task says", "order": 1}]}
COMMENT = "Spell the numbers out as words"
LESSON = f"{COMMENT} (on app/long.py)"


@pytest.fixture
def commented(fake_llm, awaiting_run: PipelineRun, owner) -> PipelineRun:
    """The run's line 15 commented on, changes requested, the round done, approved."""
    project = awaiting_run.task.project
    project.learn_distil = False
    project.save()
    line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=15, body=COMMENT)
    fake_llm.script(
        *coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 'fifteen'  # 15\n"), ToolReply(input=PASS)
    )
    run = drive_in_process(run_request_changes(run=awaiting_run, feedback="Tidy it up", actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    run = run_approve(run=run, actor=owner)
    assert run.status == RunStatus.APPROVED, run.error
    return run


def lesson() -> Memory:
    return Memory.objects.get(content=LESSON)


def system_prompts_of_a_run(fake_llm, project, owner, title: str) -> str:
    fake_llm.reset()
    task = TaskFactory(project=project, title=title, description="")
    fake_llm.script(ToolReply(input=PLAN), TextReply(text="Nothing to change."), ToolReply(input=PASS))
    drive_in_process(run_start(task=task, user=owner))
    return "\n".join(request.system_text for request in fake_llm.requests)


def test_a_line_comments_lesson_cites_its_lines_and_moves_with_the_approved_code(commented) -> None:
    memory = lesson()
    assert memory.path_scoped is True
    (citation,) = citations_from_json(memory.citations)
    assert citation.path == "app/long.py" and citation.start == 15
    # Re-anchored on approval to the lines as they landed (the round edited line 15).
    assert citation.commit == commented.head_commit
    assert citation.text == "line_15 = 'fifteen'  # 15"
    # The general feedback is a lesson for the whole project.
    assert Memory.objects.get(content="Tidy it up").path_scoped is False


def test_recalled_for_a_task_touching_the_file_and_not_for_one_that_does_not(fake_llm, commented, owner) -> None:
    project = commented.task.project
    touching = system_prompts_of_a_run(fake_llm, project, owner, "Add line_21 to app/long.py")
    assert f"- {LESSON}" in touching
    elsewhere = system_prompts_of_a_run(fake_llm, project, owner, "Make add in app/calc.py add")
    assert LESSON not in elsewhere


def test_once_its_file_is_gone_from_the_base_it_is_stale_and_shown_so(
    fake_llm, commented, owner, repo_root, owner_session_client
) -> None:
    git(repo_root, "rm", "--quiet", "app/long.py")
    git_commit(repo_root, "Remove long.py")
    project = commented.task.project
    prompts = system_prompts_of_a_run(fake_llm, project, owner, "Bring back app/long.py")
    assert LESSON not in prompts
    memory = lesson()
    assert memory.stale_at is not None
    assert "app/long.py line 15 (file gone)" in memory.stale_reason

    page = owner_session_client.get("/memory/recall")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Stale" in html and "app/long.py line 15 (file gone)" in html
    api = owner_session_client.get(f"/api/memory/memories/{memory.pk}").json()
    assert api["stale"] is True and "file gone" in api["stale_reason"]
    assert api["citations"][0]["path"] == "app/long.py"


def test_reading_a_repository_at_a_commit(linked, repo_root) -> None:
    first = git(repo_root, "rev-parse", "HEAD")
    (repo_root / "app" / "new.py").write_text("x = 1\n")
    git(repo_root, "add", "-A")
    git_commit(repo_root, "New")
    second = git(repo_root, "rev-parse", "HEAD")
    files = files_at_commit(repository=linked, commit=first, paths={"app/calc.py", "app/new.py", "app"})
    assert files["app/calc.py"].startswith("def add") and files["app/new.py"] is None and files["app"] is None
    assert commit_contains(repository=linked, commit=second, ancestor=first)
    assert not commit_contains(repository=linked, commit=first, ancestor=second)
    assert not commit_contains(repository=linked, commit=first, ancestor="0" * 40)
    assert branch_changed_paths(repository=linked, base=first, head=second) == ["app/new.py"]
