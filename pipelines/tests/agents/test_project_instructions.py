"""Project instructions reach every agent's system prompt: the repository's AGENTS.md
(or CLAUDE.md) from the run's worktree and the project's own setting, in the cached
system prompt, after the role and before the memory context."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.agents.prompts import CODER_EDITING_ROLE, SYSTEM_PROMPTS
from pipelines.models import RunStatus
from pipelines.runs.services import run_start
from pipelines.tests.repositories import committed_repository, git, git_commit
from repos.services import repository_link
from tasks.models import Task
from tests.factories import TaskFactory
from tests.fake_anthropic import TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Do it", "description": "All of it", "order": 1}]}
CREATE_X = {"command": "create", "path": "app/x.py", "file_text": "x = 1\n"}
PASS = {"pass": True, "findings": []}
EPHEMERAL = {"type": "ephemeral"}


def make_repo(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    return committed_repository(tmp_path / "repos" / "proj", {"app/__init__.py": "", **files})


@pytest.fixture
def task(project) -> Task:
    return TaskFactory(project=project, title="Add x", description="x should exist")


def run_on(fake_llm, task: Task, owner) -> None:
    # The Coder edits the worktree (of the project's own repository when it links
    # none): an edit, then its summary.
    coder = [ToolReply(name="str_replace_based_edit_tool", input=CREATE_X), TextReply("Added x.")]
    fake_llm.script(ToolReply(input=PLAN), *coder, ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert len(fake_llm.requests) == 2 + len(coder)


def test_agents_md_and_the_project_setting_are_in_every_system_prompt(fake_llm, project, task, owner, tmp_path) -> None:
    root = make_repo(tmp_path, {"AGENTS.md": "Always use tabs. MARK-AGENTS", "CLAUDE.md": "MARK-CLAUDE"})
    repository_link(project=project, path=str(root))
    project.instructions = "Write docstrings. MARK-SETTING"
    project.save()
    run_on(fake_llm, task, owner)
    roles = (SYSTEM_PROMPTS["planner"], CODER_EDITING_ROLE, CODER_EDITING_ROLE, SYSTEM_PROMPTS["reviewer"])
    for request, role in zip(fake_llm.requests, roles, strict=True):
        system = request.system_text
        assert "# Project instructions" in system
        assert "From AGENTS.md" in system and "MARK-AGENTS" in system
        assert "MARK-CLAUDE" not in system  # AGENTS.md wins
        assert "MARK-SETTING" in system
        # After the role, before the memory context.
        assert system.index(role[:40]) < system.index("MARK-AGENTS") < system.index("MARK-SETTING")
        assert system.index("MARK-SETTING") < system.index("Current date:")
        # In the cached prefix: the system's last block carries the breakpoint.
        assert isinstance(request.body["system"], list)
        assert request.body["system"][-1]["cache_control"] == EPHEMERAL


def test_claude_md_is_used_without_agents_md(fake_llm, project, task, owner, tmp_path) -> None:
    root = make_repo(tmp_path, {"CLAUDE.md": "Run make lint. MARK-CLAUDE"})
    repository_link(project=project, path=str(root))
    run_on(fake_llm, task, owner)
    for request in fake_llm.requests:
        assert "From CLAUDE.md" in request.system_text and "MARK-CLAUDE" in request.system_text
        assert "From the project's settings" not in request.system_text


def test_a_big_agents_md_is_cut_with_a_note(fake_llm, project, task, owner, tmp_path) -> None:
    big = "START\n" + ("y" * 99 + "\n") * 1000 + "END-OF-FILE\n"
    root = make_repo(tmp_path, {"AGENTS.md": big})
    repository_link(project=project, path=str(root))
    run_on(fake_llm, task, owner)
    system = fake_llm.requests[0].system_text
    assert "START" in system and "END-OF-FILE" not in system
    assert f"[truncated: the file is {len(big.encode())} bytes]" in system
    assert system.count("y") < 17_000


def test_a_symlinked_agents_md_leading_outside_is_not_read(fake_llm, project, task, owner, tmp_path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("MARK-SECRET")
    root = make_repo(tmp_path, {"CLAUDE.md": "MARK-CLAUDE"})
    (root / "AGENTS.md").symlink_to(secret)
    git(root, "add", "-A")
    git_commit(root, "Link")
    repository_link(project=project, path=str(root))
    run_on(fake_llm, task, owner)
    for request in fake_llm.requests:
        assert "MARK-SECRET" not in request.system_text
        assert "MARK-CLAUDE" in request.system_text  # the next candidate is used


def test_without_a_repository_the_setting_alone_is_sent(fake_llm, project, task, owner) -> None:
    project.instructions = "MARK-SETTING"
    project.save()
    run_on(fake_llm, task, owner)
    for request in fake_llm.requests:
        assert "From the project's settings\nMARK-SETTING" in request.system_text
        assert "From AGENTS.md" not in request.system_text


def test_without_instructions_there_is_no_section(fake_llm, task, owner) -> None:
    run_on(fake_llm, task, owner)
    assert all("# Project instructions" not in request.system_text for request in fake_llm.requests)
