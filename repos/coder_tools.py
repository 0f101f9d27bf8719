"""The Coder's tools in a run's worktree, behind one dispatcher: the text editor
(``str_replace_based_edit_tool``), ``search_code``, ``delete_file`` (repos/editor.py) and
``run_tests``, the project's test command run the way the verify step runs it
(repos/verify.py: sandboxed, the same limits and timeout).

``coder_tools()`` gives the definitions for a request: the editor's server-defined
dict for ``LLMRequest.server_tools`` and the ``Tool`` objects for ``explore_tools``.
The read-only ``list_files``/``read_file`` are left out: the editor's ``view`` does both.

``coder_tool_run(worktree, name, tool_input, test_command=…, session=…)`` never raises
for bad input or a failed command: each problem is a ``ToolOutcome`` with ``is_error``.
A ``CoderSession`` (one per conversation) counts the test runs, at most
``CODER_MAX_TEST_RUNS``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from core.exceptions import SandboxUnavailable
from core.masking import NO_MASKING, OutputMasker
from core.sandbox import NO_PROJECT, ProjectSandbox
from llm.providers.base import Tool

from .editor import DELETE_FILE, EDITOR_TOOL, EDITOR_TOOL_NAME, ToolOutcome, editor_run
from .tools import SEARCH_CODE
from .verify import VerifyResult, run_project_tests

RUN_TESTS = Tool(
    name="run_tests",
    description=(
        "Run the project's test command in the repository, as it is now (your edits included), in a sandbox "
        "without network. Answers the exit status and the end of the output. Runs are limited per task: "
        "run the tests when a change is complete, not after every edit."
    ),
    input_schema={
        "type": "object",
        "properties": {"note": {"type": "string", "description": "Optional: what this run should show."}},
    },
)
CUT_MARKER = "[… {dropped} earlier characters cut]\n"


@dataclass
class CoderSession:
    """One Coder conversation's state across tool calls: the test runs made so far.

    ``on_output`` receives the test command's output as it streams (e.g. the run's log);
    ``should_cancel`` stops a running command (e.g. the run was cancelled).
    ``project`` is how the project's commands run (its variables among them) and
    ``masker`` takes its secrets out of the output, before the stream and the tool's
    result (which goes to the model) see it."""

    max_test_runs: int | None = None  # None: settings.CODER_MAX_TEST_RUNS
    test_runs: int = 0
    on_output: Callable[[str], None] = field(default=lambda text: None)
    should_cancel: Callable[[], bool] = field(default=lambda: False)
    project: ProjectSandbox = NO_PROJECT
    masker: OutputMasker = NO_MASKING

    @property
    def test_run_limit(self) -> int:
        return settings.CODER_MAX_TEST_RUNS if self.max_test_runs is None else self.max_test_runs


def coder_tools() -> tuple[tuple[dict[str, Any], ...], tuple[Tool, ...]]:
    """The Coder's tools: (server-defined tool dicts, client ``Tool``s), i.e.
    ``LLMRequest(server_tools=…, explore_tools=…)``."""
    return (EDITOR_TOOL,), (SEARCH_CODE, DELETE_FILE, RUN_TESTS)


def coder_tool_names() -> tuple[str, ...]:
    server, client = coder_tools()
    return (*(str(tool["name"]) for tool in server), *(tool.name for tool in client))


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return CUT_MARKER.format(dropped=len(text) - limit) + text[-limit:]


def _test_outcome(result: VerifyResult, runs_left: int) -> ToolOutcome:
    if result.cancelled:
        status = "The test command was cancelled."
    elif result.timed_out:
        status = f"The test command did not finish in {settings.VERIFY_TIMEOUT_SECONDS} s and was killed."
    elif result.exit_code is None:
        status = "The test command could not run."
    elif result.passed:
        status = "The tests passed (exit status 0)."
    else:
        status = f"The tests failed (exit status {result.exit_code})."
    output = _tail(result.output, settings.CODER_TEST_OUTPUT_MAX_CHARS).rstrip("\n") or "(no output)"
    left = f"{runs_left} test run{'' if runs_left == 1 else 's'} left."
    return ToolOutcome(f"{status} {left}\nOutput:\n{output}", is_error=not result.passed)


def _run_tests(worktree: Path, test_command: str, session: CoderSession) -> ToolOutcome:
    if not test_command.strip():
        return ToolOutcome("This project has no test command, so run_tests cannot run anything.", is_error=True)
    limit = session.test_run_limit
    if session.test_runs >= limit:
        return ToolOutcome(
            f"No test runs are left: the limit is {limit} per task. Finish the change without running the tests; "
            "they run once more after you are done.",
            is_error=True,
        )
    session.test_runs += 1
    try:
        result = run_project_tests(
            command=test_command,
            worktree=worktree,
            on_output=session.on_output,
            should_cancel=session.should_cancel,
            project=session.project,
            masker=session.masker,
        )
    except SandboxUnavailable as exc:
        session.test_runs -= 1  # nothing ran
        return ToolOutcome(f"The tests cannot run here: {exc}", is_error=True)
    return _test_outcome(result, limit - session.test_runs)


def coder_tool_run(
    worktree: Path,
    name: str,
    tool_input: dict[str, Any] | None,
    *,
    test_command: str,
    session: CoderSession,
    max_characters: int | None = None,
) -> ToolOutcome:
    """Run one Coder tool call in ``worktree``; every problem is an is_error outcome.
    What it answers goes to the model: the session's secrets are masked in it, also
    where a file shows them (a test run may have written its environment into one)."""
    if name == RUN_TESTS.name:
        return _run_tests(Path(worktree), test_command, session)
    if name in (EDITOR_TOOL_NAME, SEARCH_CODE.name, DELETE_FILE.name):
        if tool_input is None:
            return ToolOutcome("The tool input was not valid JSON; call the tool again.", is_error=True)
        limit = settings.AGENT_TOOL_OUTPUT_MAX_CHARS if max_characters is None else max_characters
        outcome = editor_run(Path(worktree), name, tool_input, max_characters=limit)
        return dataclasses.replace(outcome, content=session.masker.mask(outcome.content))
    return ToolOutcome(f"There is no tool {name!r}; use {', '.join(coder_tool_names())}.", is_error=True)
