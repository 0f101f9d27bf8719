"""The branch holds only the change: what the Coder wrote, and changes to tracked
files. New files a test command made (reports, build output, a nested repository) stay
out of the commit and are listed beside the diff, on the panel and in the API.

Real git repositories in tmp_path; the LLM is the fake Anthropic server, scripted."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.sandbox_bwrap import SANDBOX_ROOT
from core.tests.test_sandbox import needs_bwrap
from llm.providers.base import ToolCall
from pipelines.agents.coder_cli import cli_written_path, cli_written_paths
from pipelines.models import PipelineRun, RunStatus
from pipelines.runs.services import run_start
from pipelines.runs.workspace import workspace_record_written
from pipelines.tests.repositories import git
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}
FIX = {"new_str": "return a + b"}
# A test suite that leaves things behind: a report, build output (three files), and a
# nested repository.
MESSY_TESTS = (
    "echo '<testsuite/>' > report.xml && mkdir -p build/lib && touch build/a.o build/b.o build/lib/c.o "
    "&& git init -q sub && echo ok"
)


@needs_bwrap
def test_the_branch_holds_only_what_the_coder_wrote_and_the_rest_is_listed(
    fake_llm, linked, repo_root, task, owner, owner_client, owner_session_client
) -> None:
    linked.test_command = MESSY_TESTS
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name=EDITOR, input={"command": "create", "path": "src/new.py", "file_text": "TWO = 2\n"}),
        ToolReply(
            name=EDITOR,
            input={
                "command": "str_replace",
                "path": "app/calc.py",
                "old_str": "return a - b",
                "new_str": "return a + b",
            },
        ),
        ToolReply(name="run_tests", input={}),
        TextReply("Fixed add."),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL

    committed = git(repo_root, "diff", "--name-only", run.base_commit, run.branch).splitlines()
    assert sorted(committed) == ["app/calc.py", "src/new.py"]
    assert git(repo_root, "ls-tree", "-r", "--name-only", run.branch, "--", "sub", "build", "report.xml") == ""
    assert sorted(run.written_paths) == ["app/calc.py", "src/new.py"]
    by_path = {entry["path"]: entry for entry in run.left_out}
    assert set(by_path) == {"report.xml", "build/", "sub/"}
    assert by_path["build/"]["files"] == 3 and not by_path["build/"].get("repository")
    assert by_path["sub/"].get("repository") is True
    # The worktree still holds them: left out, not deleted.
    assert (Path(run.worktree_path) / "report.xml").is_file()

    page = owner_session_client.get(f"/tasks/{task.pk}/pipeline", HTTP_HX_REQUEST="true").content.decode()
    assert 'data-testid="left-out"' in page and "Left out of the commit" in page
    for shown in ("<code>report.xml</code>", "<code>build/</code>", "(3 files)", "<code>sub/</code>"):
        assert shown in page, shown

    api = owner_client.get(f"/api/runs/{run.pk}").json()
    assert {entry["path"] for entry in api["left_out"]} == {"report.xml", "build/", "sub/"}
    assert sorted(api["written_paths"]) == ["app/calc.py", "src/new.py"]


@needs_bwrap
def test_a_new_folder_the_coder_wrote_into_commits_its_file_and_lists_the_rest(
    fake_llm, linked, repo_root, task, owner
) -> None:
    linked.test_command = "mkdir -p pkg/__pycache__ && touch pkg/__pycache__/mod.pyc && echo ok"
    linked.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        ToolReply(name=EDITOR, input={"command": "create", "path": "pkg/mod.py", "file_text": "X = 1\n"}),
        ToolReply(name="run_tests", input={}),
        TextReply("Added pkg."),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert git(repo_root, "diff", "--name-only", run.base_commit, run.branch).splitlines() == ["pkg/mod.py"]
    assert run.left_out == [{"path": "pkg/", "files": 1}]


def test_written_paths_accumulate_on_the_run_and_survive_a_reload(task) -> None:
    run = PipelineRun.objects.create(task=task, number=1)
    workspace_record_written(run, ["a.py", "b/c.py"])
    workspace_record_written(PipelineRun.objects.get(pk=run.pk), ["a.py", "d.py"])
    assert PipelineRun.objects.get(pk=run.pk).written_paths == ["a.py", "b/c.py", "d.py"]


def _call(name: str, **tool_input: object) -> ToolCall:
    return ToolCall(id="t1", name=name, input=dict(tool_input))


def test_a_cli_write_is_mapped_from_its_view_of_the_worktree(tmp_path: Path) -> None:
    worktree = tmp_path / "worktrees" / "task-1-run-1"
    assert cli_written_path(_call("Write", file_path=f"{SANDBOX_ROOT}/src/new.py", content="x"), worktree) == (
        "src/new.py"
    )
    assert cli_written_path(_call("Edit", file_path=f"{worktree}/app/calc.py"), worktree) == "app/calc.py"
    assert cli_written_path(_call("Write", file_path="docs/./a.md"), worktree) == "docs/a.md"


def test_a_cli_path_outside_the_worktree_or_a_reading_tool_is_ignored(tmp_path: Path) -> None:
    worktree = tmp_path / "worktree"
    outside = [
        _call("Write", file_path="/home/sandbox/.bashrc"),
        _call("Write", file_path=f"{SANDBOX_ROOT}/../etc/x"),
        _call("Write", file_path="../elsewhere.py"),
        _call("Edit", file_path=f"{SANDBOX_ROOT}/.git/config"),
        _call("Write", file_path=f"{SANDBOX_ROOT}-other/a.py"),
        _call("Read", file_path=f"{SANDBOX_ROOT}/a.py"),
        _call("Write", file_path=42),
        ToolCall(id="t", name="Write", input=None),
    ]
    assert [cli_written_path(call, worktree) for call in outside] == [None] * len(outside)
    assert cli_written_paths([*outside, _call("Write", file_path=f"{SANDBOX_ROOT}/ok.py")], worktree) == ["ok.py"]
