"""A run on the linked calc repository, with a twenty-line file, awaiting approval of
a change on line 15: the diff that line comments and the panel's tests look at."""

from __future__ import annotations

import pytest

from pipelines.models import PipelineRun, RunStatus
from pipelines.runs.services import run_start
from pipelines.tests.repositories import CALC_FILES
from tests.fake_anthropic import ToolReply, coder_replaces
from tests.workers import drive_in_process

PLAN = {"subtasks": [{"id": "s1", "title": "Name line 15", "description": "Spell it out", "order": 1}]}
# Twenty lines: a change on line 15 shows lines 12–18 (three lines of context each side).
LONG = "".join(f"line_{n} = {n}\n" for n in range(1, 21))


@pytest.fixture
def repo_files() -> dict[str, str | bytes]:
    return {**CALC_FILES, "app/long.py": LONG}


@pytest.fixture
def awaiting_run(fake_llm, linked, task, owner) -> PipelineRun:
    fake_llm.script(
        ToolReply(input=PLAN),
        *coder_replaces("app/long.py", "line_15 = 15\n", "line_15 = 'fifteen'\n"),
        ToolReply(input={"pass": True, "findings": []}),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    return run
