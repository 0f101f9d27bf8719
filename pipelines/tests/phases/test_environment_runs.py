"""Runs on a real-shaped Python library whose tests import a third-party package: the
run prepares the environment before the Coder's first edit, runs the tests once on the
base, pauses as "environment broken" (no Coder call, no fix round) when they cannot even
start, tells the failures it found from the ones it causes, and prepares again when its
change touches a lockfile.

Real git, the real sandbox, a local package index on 127.0.0.1, the fake Anthropic
server scripted."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.tests.test_sandbox import needs_bwrap
from pipelines.models import AgentCall, RunStatus
from pipelines.runs.services import run_retry, run_start
from pipelines.tests.repositories import committed_repository, git, log_text
from repos.models import BaseTestResult, PreparedEnvironment, Repository
from repos.services import repository_link
from repos.tests.package_index import PackageIndex
from tests.factories import TaskFactory
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = [pytest.mark.django_db, needs_bwrap]

CALC = "def add(a, b):\n    return a - b\n"
TESTS = (
    "import unittest\n\nimport tinydep\n\nfrom calc import add\n\n\n"
    "class Test(unittest.TestCase):\n"
    "    def test_double(self):\n        self.assertEqual(tinydep.double(2), 4)\n\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
    "    def test_upstream_known_bug(self):\n        self.assertEqual(tinydep.double(0.1), 0.3)\n"
)
FILES: dict[str, str | bytes] = {
    "requirements.txt": "tinydep==1.0\n",
    "calc.py": CALC,
    "test_calc.py": TESTS,
    ".gitignore": ".venv/\n",
}
PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}
FIX = ToolReply(
    name=EDITOR, input={"command": "str_replace", "path": "calc.py", "old_str": "a - b", "new_str": "a + b"}
)
DONE = TextReply("Fixed add.")


@pytest.fixture
def package_index(tmp_path: Path):
    index = PackageIndex(tmp_path / "index")
    index.add("tinydep", "1.0", {"tinydep/__init__.py": "def double(x):\n    return 2 * x\n"})
    index.add(
        "tinydep",
        "1.1",
        {"tinydep/__init__.py": "def double(x):\n    return 2 * x\n\n\ndef triple(x):\n    return 3 * x\n"},
    )
    with index.serving():
        yield index


@pytest.fixture
def library(project, tmp_path: Path, settings) -> Repository:
    settings.ENVIRONMENTS_ROOT = str(tmp_path / "environments")
    root = committed_repository(tmp_path / "repos" / "lib", FILES)
    return repository_link(project=project, path=str(root), test_command="python -m unittest -v test_calc")


def setup_script(index: PackageIndex) -> str:
    return f"python3 -m venv .venv\n.venv/bin/pip install --no-input --index-url {index.url} -r requirements.txt"


def test_tests_that_cannot_start_pause_the_run_before_the_coder_and_retry_goes_on_once_fixed(
    fake_llm, library, package_index, project, owner
) -> None:
    task = TaskFactory(project=project, title="Fix add", description="add(2, 3) should be 5")
    fake_llm.script(ToolReply(input=PLAN), FIX, DONE, ToolReply(input=PASS))

    run = drive_in_process(run_start(task=task, user=owner))

    # No setup yet: `python` does not exist in the sandbox. The environment, not the code.
    assert run.status == RunStatus.PAUSED and run.phase == RunStatus.PREPARING
    assert run.pause_kind == "environment_broken"
    assert "python is not installed" in run.error and "setup script" in run.error
    assert len(fake_llm.requests) == 1, "only the Planner was called: no Coder, no fix round"
    assert run.iteration == 0
    assert not BaseTestResult.objects.exists(), "a command that could not start is not kept as the base's result"

    library.setup_script = setup_script(package_index)
    library.save()
    run = drive_in_process(run_retry(run=run, actor=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    statuses = list(run.transitions.values_list("to_status", flat=True))
    assert statuses == [
        "queued", "planning", "preparing", "paused", "preparing", "coding", "verifying", "reviewing",
        "awaiting_approval",
    ]  # fmt: skip
    assert run.pause_kind == ""
    base = run.environment["base_tests"]
    assert base["passed"] is False
    assert sorted(base["failing_tests"]) == [
        "test_add (test_calc.Test.test_add)",
        "test_upstream_known_bug (test_calc.Test.test_upstream_known_bug)",
    ]
    # After the fix only the failure the base already had is left: not this change's,
    # so no finding, and the Reviewer was told which failures were there before.
    assert run.verify_result["passed"] is False
    assert "test_upstream_known_bug" in run.verify_result["output"]
    assert run.review_history[-1]["pass"] is True and run.review_history[-1]["findings"] == []
    reviewer = fake_llm.requests[-1]
    assert "already failed on the base commit" in reviewer.prompt_text
    environment_log = log_text(run, "environment")
    assert "+ python3 -m venv .venv" in environment_log and "[base tests: 2 already failing" in environment_log
    assert AgentCall.objects.filter(run=run, agent="coder").exists()
    # The branch holds the fix only: no virtualenv.
    assert git(Path(library.path), "diff", "--name-only", f"{run.base_commit}..{run.branch}") == "calc.py"


def test_a_second_run_of_the_same_base_reuses_the_environment_and_the_base_tests(
    fake_llm, library, package_index, project, owner
) -> None:
    library.setup_script = setup_script(package_index)
    library.save()
    first_task = TaskFactory(project=project, title="First", description="x")
    second_task = TaskFactory(project=project, title="Second", description="y")
    fake_llm.script(ToolReply(input=PLAN), DONE, ToolReply(input=PASS))
    first = drive_in_process(run_start(task=first_task, user=owner))
    assert first.status == RunStatus.AWAITING_APPROVAL, first.error
    requests = len(package_index.requests)

    fake_llm.script(ToolReply(input=PLAN), DONE, ToolReply(input=PASS))
    second = drive_in_process(run_start(task=second_task, user=owner))

    assert second.status == RunStatus.AWAITING_APPROVAL, second.error
    assert second.environment["prepared_now"] is False
    assert second.environment["prepared_id"] == first.environment["prepared_id"]
    assert second.environment["base_tests"]["ran_now"] is False
    assert len(package_index.requests) == requests, "nothing downloaded for the second run"
    assert PreparedEnvironment.objects.count() == 1 and BaseTestResult.objects.count() == 1
    assert "known from an earlier run" in log_text(second, "environment")


def test_a_change_to_the_lockfile_prepares_the_environment_of_the_change(
    fake_llm, library, package_index, project, owner
) -> None:
    library.setup_script = setup_script(package_index)
    library.test_command = "python -c 'import tinydep; assert tinydep.triple(2) == 6; print(\"triple ok\")'"
    library.save()
    task = TaskFactory(project=project, title="Use tinydep 1.1", description="triple")
    bump = ToolReply(
        name=EDITOR,
        input={"command": "str_replace", "path": "requirements.txt", "old_str": "==1.0", "new_str": "==1.1"},
    )
    fake_llm.script(ToolReply(input=PLAN), bump, DONE, ToolReply(input=PASS))

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.verify_result["passed"] is True, run.verify_result["output"]
    verifier_log = log_text(run, "verifier")
    assert "The change touches files the environment is keyed by" in verifier_log
    assert "triple ok" in verifier_log
    assert PreparedEnvironment.objects.filter(status="ready").count() == 2
    base_key = PreparedEnvironment.objects.order_by("created_at").first().key
    assert run.environment["key"] != base_key and run.environment["prepared_now"] is True


def test_a_setup_script_that_fails_pauses_the_run_saying_so(fake_llm, library, project, owner) -> None:
    library.setup_script = "echo fetching\nexit 3"
    library.save()
    task = TaskFactory(project=project, title="Anything", description="x")
    fake_llm.script(ToolReply(input=PLAN))

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.PAUSED and run.pause_kind == "environment_broken"
    assert "exited with status 3" in run.error and "fetching" in run.error
    assert len(fake_llm.requests) == 1
    assert "fetching" in log_text(run, "environment")


def test_what_the_environment_restored_is_neither_committed_nor_listed_as_left_out(
    fake_llm, project, owner, tmp_path, settings
) -> None:
    settings.ENVIRONMENTS_ROOT = str(tmp_path / "environments")
    # No ignore rule: the restored folder is untracked in every worktree.
    root = committed_repository(tmp_path / "repos" / "plain", {"calc.py": CALC})
    repository = repository_link(project=project, path=str(root), test_command="test -f deps/lib.txt && echo has-deps")
    repository.setup_script = "mkdir -p deps && echo lib > deps/lib.txt"
    repository.save()
    task = TaskFactory(project=project, title="Fix add", description="x")
    report = ToolReply(name=EDITOR, input={"command": "create", "path": "NOTES.md", "file_text": "fixed\n"})
    fake_llm.script(ToolReply(input=PLAN), FIX, report, DONE, ToolReply(input=PASS))

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.environment["paths"] == ["deps"]
    assert "has-deps" in log_text(run, "verifier")
    changed = git(Path(repository.path), "diff", "--name-only", f"{run.base_commit}..{run.branch}").splitlines()
    assert changed == ["NOTES.md", "calc.py"]
    assert all(entry["path"].rstrip("/") != "deps" for entry in run.left_out), run.left_out


@pytest.mark.parametrize("gitignore", ["", "lib/\nlib64/\n"], ids=["nothing-ignored", "python-template-lib"])
def test_a_venv_the_repository_does_not_ignore_is_in_every_phase_and_never_in_the_change(
    fake_llm, package_index, project, owner, tmp_path, settings, gitignore
) -> None:
    """Seen with python-slugify, whose .gitignore (GitHub's Python template) ignores
    ``lib/`` but not ``.venv``: the coding phase's ``git clean`` took ``.venv/bin`` and
    left ``.venv/lib``, so the Coder's and the Testing phase's ``python`` were missing;
    restored whole, the virtualenv then went into the run's commit with the fix."""
    settings.ENVIRONMENTS_ROOT = str(tmp_path / "environments")
    files = {**FILES, ".gitignore": gitignore} if gitignore else {k: v for k, v in FILES.items() if k != ".gitignore"}
    root = committed_repository(tmp_path / "repos" / "lib", files)
    library = repository_link(project=project, path=str(root), test_command="python -m unittest -v test_calc")
    library.setup_script = setup_script(package_index)
    library.save()
    task = TaskFactory(project=project, title="Fix add", description="add(2, 3) should be 5")
    fake_llm.script(ToolReply(input=PLAN), FIX, ToolReply(name="run_tests", input={}), DONE, ToolReply(input=PASS))

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.environment["paths"] == [".venv"]
    assert "not found" not in log_text(run, "coder"), "the Coder's run_tests had the virtualenv"
    assert "test_add" in log_text(run, "coder")
    assert "not found" not in run.verify_result["output"] and "test_double" in run.verify_result["output"]
    assert "test_upstream_known_bug" in run.verify_result["output"]
    # The change is the fix alone, in the branch and in the run's list of files.
    assert git(Path(library.path), "diff", "--name-only", f"{run.base_commit}..{run.branch}") == "calc.py"
    assert [change["file_path"] for change in run.file_changes] == ["calc.py"]
    assert all(entry["path"].rstrip("/") != ".venv" for entry in run.left_out), run.left_out


def test_a_module_the_repository_lost_is_failing_code_not_a_broken_environment(
    fake_llm, project, owner, tmp_path, settings
) -> None:
    settings.ENVIRONMENTS_ROOT = str(tmp_path / "environments")
    files: dict[str, str | bytes] = {
        "app/__init__.py": "",
        "app/calc.py": CALC,
        # app/inventory.py was removed on the base; its tests still import it.
        "test_app.py": "import unittest\n\nfrom app.inventory import stock\n\n\n"
        "class Test(unittest.TestCase):\n    def test_stock(self):\n        self.assertEqual(stock(), 1)\n",
    }
    root = committed_repository(tmp_path / "repos" / "app", files)
    repository_link(project=project, path=str(root), test_command="python3 -m unittest -v test_app")
    task = TaskFactory(project=project, title="Bring back app/inventory.py", description="stock() returns 1")
    fake_llm.script(ToolReply(input=PLAN), DONE, ToolReply(input=PASS))

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.pause_kind != "environment_broken", run.error
    assert AgentCall.objects.filter(run=run, agent="coder").exists(), "the Coder was called"
    assert run.environment["base_tests"]["passed"] is False
    kept = BaseTestResult.objects.get()
    assert "No module named 'app.inventory'" in kept.output
