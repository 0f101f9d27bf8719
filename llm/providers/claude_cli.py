"""The Claude command-line tool (npm ``@anthropic-ai/claude-code``, pinned in
tools/claude-cli) as a provider: ``claude -p --output-format stream-json``, the prompt on
stdin.

A one-shot answer (the Planner's, the Reviewer's…) gets AutoCoder's own system prompt in
place of the CLI's (``--system-prompt-file``) and no tools; where the agent answers
with a tool, its schema goes to ``--json-schema`` and the CLI's ``structured_output``
is the tool input (the JSON object in its text where there is none:
claude_cli_prompt.py). Every failure's message starts with "Error: " and says briefly
what the CLI's result said (claude_cli_events.py); its API retries show in the live log.

A request with a ``worktree`` is the Coder editing it (``edits_worktree``): the CLI
runs there as an agent with its own file tools only (Read, Edit, Write, Glob, Grep;
Bash for exactly ``autocoder-run-tests``, which runs the project's test command in a
sandbox of its own, if there is one; no web tools, no MCP servers; only what
``--allowedTools`` names runs), streaming its events into the live log.

The CLI logs in with the key and API the server is configured with
(``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``), else the operator's own login of it
(claude_cli_login.py); nothing else of the server's environment reaches it.

Every call — the Coder's and the one-shot answers of the Planner, the Reviewer and the
assistant alike — runs in the sandbox (llm/providers/claude_cli_sandbox.py: no network
but the API through a relay, a private config folder removed afterwards, the login in
the CLI's environment only), started and read by claude_cli_process.py; a timeout or a
cancel kills it. Where no sandbox can be made it does not run (SandboxUnavailable);
with the operator's ``UNSAFE_RUN_TESTS_WITHOUT_SANDBOX`` it runs unsandboxed (with a
private config folder still), saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from core.exceptions import SandboxUnavailable
from core.masking import OutputMasker
from core.sandbox import SANDBOX_DISABLED_WARNING
from core.sandbox_bwrap import SANDBOX_HOME
from core.sandbox_probe import sandbox_status

from .base import CancelCheck, Cancelled, ChunkCallback, LLMRequest, LLMResult, ProviderError
from .claude_cli_events import CliEvents
from .claude_cli_login import API_KEY_VARIABLE
from .claude_cli_process import cli_finished, cli_started, output_lines
from .claude_cli_prompt import answer_json, answer_prompt, request_test_command
from .claude_cli_sandbox import TEST_RUNNER

CLI_ENVIRONMENT = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TERM",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "ANTHROPIC_BASE_URL",
    }
)
# The Coder's tools in the CLI (2.1.x: MultiEdit is gone): its own file tools. No web
# tools, no subagents (Task), no shell but the project's test command (as TEST_RUNNER,
# in a sandbox of its own).
EDIT_TOOLS = ("Read", "Edit", "Write", "Glob", "Grep")
DENIED_TOOLS = ("WebFetch", "WebSearch", "Task", "NotebookEdit")
SANDBOX_HOME_RULE = "//" + SANDBOX_HOME.lstrip("/") + "/**"
# AutoCoder's own system prompt for a one-shot call, in its (otherwise empty) working
# folder: it replaces the CLI's ~7,600-token default (--system-prompt-file), and on no
# command line (argv is public and bounded).
SYSTEM_PROMPT_FILE = "autocoder-system-prompt.md"
TEST_RUNNER_HINT = (
    "The project's tests run with the shell command `{runner}` (exactly that, through Bash): "
    "it runs the test command in a sandbox of its own. No other shell command is allowed."
)


class ClaudeCliProvider:
    label = "Claude CLI"
    # The CLI answers once per call: agents get no exploration tools through it.
    supports_tools = False
    # The Coder instead runs the CLI as an agent in the run's worktree (``_edit``).
    edits_worktree = True

    def __init__(
        self,
        *,
        executable: str = "claude",
        timeout: float = 600,
        model: str = "",
        sandbox_paths: tuple[str, ...] = (),
        api_key: str = "",
        base_url: str = "",
    ) -> None:
        self.executable = executable
        self.timeout = timeout
        self.model = model
        self.sandbox_paths = sandbox_paths
        # The key and API the server is configured with (settings.ANTHROPIC_API_KEY,
        # ANTHROPIC_BASE_URL): the CLI's login and endpoint when given.
        self.api_key = api_key
        self.base_url = base_url

    def _command(self, request: LLMRequest, executable: str) -> list[str]:
        # No tools: the CLI would otherwise read (Read, Grep, Glob) any file the worker
        # can — its .env, the database — at the word of a prompt a user wrote. MCP
        # servers from the CLI's own config are tools too.
        command = [
            executable,
            "-p",  # the prompt comes on stdin: it can outgrow an argument, and argv is public
            "--output-format",
            "stream-json",  # its events: the live log shows its API retries
            "--verbose",
            "--tools",
            "",
            "--strict-mcp-config",
        ]
        if request.system:
            command += ["--system-prompt-file", SYSTEM_PROMPT_FILE]
        if request.tool is not None:
            # Its answer is the StructuredOutput tool's input, checked against the schema
            # by the CLI; the title names the agent's own tool (submit_plan…).
            schema = {"title": request.tool.name, **request.tool.input_schema}
            command += ["--json-schema", json.dumps(schema)]
        if self.model or request.model:
            command += ["--model", self.model or request.model]
        return command

    def complete(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        if should_cancel():
            raise Cancelled
        if request.worktree:
            return self._edit(request, on_chunk=on_chunk, should_cancel=should_cancel)
        # The child gets nothing of the server's environment but what finds the CLI and
        # its own login, in a sandbox of its own (no tools, no files: a working folder
        # with only the system prompt, a private config folder removed afterwards).
        env = self._environment()
        status = sandbox_status()
        if not status.available:
            raise SandboxUnavailable(status.message)
        executable = self._located()
        workdir = Path(tempfile.mkdtemp(prefix="autocoder-claude-cli-"))
        workdir.chmod(0o755)  # the sandbox's account reads the system prompt there
        try:
            if request.system:
                (workdir / SYSTEM_PROMPT_FILE).write_text(request.system)
            with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stderr:
                stdin.write(answer_prompt(request).encode("utf-8"))
                stdin.seek(0)
                argv = self._command(request, executable)
                with cli_started(
                    argv,
                    executable,
                    workdir,
                    env,
                    stdin,
                    stderr,
                    sandboxed=not status.disabled,
                    timeout=self.timeout,
                    extra_paths=self.sandbox_paths,
                ) as child:
                    events = self._events(child, on_chunk=on_chunk, should_cancel=should_cancel)
                    return self._result(request, events, child, stderr, one_shot=True)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _located(self) -> str:
        located = shutil.which(self.executable)
        if located is None:
            raise ProviderError(
                f"Error: the Claude CLI ({self.executable}) is not installed or not on PATH.", retryable=False
            )
        return os.path.realpath(located)

    def _environment(self) -> dict[str, str]:
        """What the CLI's process gets of the server's: an allow-list, the key and API the
        server is configured with (no other secret of its), and no bytecode written (the
        test runs it makes would leave ``__pycache__`` in the worktree)."""
        env = {k: v for k, v in os.environ.items() if k in CLI_ENVIRONMENT or k.startswith("CLAUDE_")}
        if self.base_url:
            env["ANTHROPIC_BASE_URL"] = self.base_url
        if self.api_key:
            # Into the CLI's environment only (claude_cli_login.py), never a command line.
            env[API_KEY_VARIABLE] = self.api_key
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    # --- The Coder editing a worktree --------------------------------------------------

    def edit_command(self, request: LLMRequest, executable: str) -> list[str]:
        """The CLI as the Coder: its file tools only, and the test command as the one
        shell command (``TEST_RUNNER``, which runs it in a sandbox of its own). Only what
        ``--allowedTools`` names runs (``dontAsk``: not even the commands
        ``acceptEdits`` lets through, ``mkdir``, ``rm``, ``sed -i``…, whose shell holds the login)."""
        runs_tests = bool(request_test_command(request))
        tools = [*EDIT_TOOLS, *(["Bash"] if runs_tests else [])]
        allowed = [*EDIT_TOOLS, *([f"Bash({TEST_RUNNER})"] if runs_tests else [])]
        command = [
            executable,
            "-p",  # the prompt comes on stdin: with a branch's diff it can outgrow an argument
            "--output-format",
            "stream-json",
            "--verbose",
            "--tools",
            ",".join(tools),
            "--allowedTools",
            ",".join(allowed),
            # Its file tools keep out of its home too, where its config is.
            "--disallowedTools",
            ",".join([*DENIED_TOOLS, f"Read({SANDBOX_HOME_RULE})", f"Edit({SANDBOX_HOME_RULE})"]),
            "--permission-mode",
            "dontAsk",
            # The repository's own .claude/settings*.json (which could allow more tools or
            # add hooks) is not read, nor an .mcp.json: only the operator's settings count.
            "--setting-sources",
            "user",
            "--strict-mcp-config",
            "--max-turns",
            str(max(1, request.max_turns)),
        ]
        hint = TEST_RUNNER_HINT.format(runner=TEST_RUNNER) if runs_tests else ""
        system = "\n\n".join(part for part in (request.system, hint) if part)
        if system:
            command += ["--append-system-prompt", system]
        if self.model or request.model:
            command += ["--model", self.model or request.model]
        return command

    def _edit(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        worktree = Path(request.worktree)
        executable = self._located()
        env = self._environment()
        status = sandbox_status()
        if not status.available:
            raise SandboxUnavailable(status.message)
        prompt = next((str(m["content"]) for m in reversed(request.messages) if m.get("role") == "user"), "")
        # The test runner masks the secrets in what the CLI reads back; what the CLI
        # then says (it may quote an output) is masked again on its way out.
        masker = OutputMasker(request.command_secrets)

        def on_masked_chunk(text: str) -> None:
            on_chunk(masker.mask(text))

        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stderr:
            stdin.write(prompt.encode("utf-8"))
            stdin.seek(0)
            if status.disabled:
                on_chunk(SANDBOX_DISABLED_WARNING)
            argv = self.edit_command(request, executable)
            with cli_started(
                argv,
                executable,
                worktree,
                env,
                stdin,
                stderr,
                sandboxed=not status.disabled,
                timeout=self.timeout,
                extra_paths=self.sandbox_paths,
                test_command=request_test_command(request),
                test_variables=request.command_variables,
                test_secrets=request.command_secrets,
                image=request.commands_image,
            ) as child:
                events = self._events(child, on_chunk=on_masked_chunk, should_cancel=should_cancel)
                result = self._result(request, events, child, stderr, one_shot=False)
        if masker:
            result.text = masker.mask(result.text)
            result.content = _masked(result.content, masker)
        return result

    def _events(
        self, child: subprocess.Popen[bytes], *, on_chunk: ChunkCallback, should_cancel: CancelCheck
    ) -> CliEvents:
        """Read the CLI's events as they come, until it ends (or the deadline, a cancel)."""
        events = CliEvents(on_chunk)
        deadline = time.monotonic() + self.timeout
        for line in output_lines(child, deadline, should_cancel):
            events.take(line)
        cli_finished(child, deadline, self.timeout, should_cancel)
        return events

    def _result(
        self,
        request: LLMRequest,
        events: CliEvents,
        child: subprocess.Popen[bytes],
        stderr: IO[bytes],
        *,
        one_shot: bool,
    ) -> LLMResult:
        """The call's result; a ProviderError saying briefly what failed. Out of turns is
        the Coder's result (its edits so far stand), a one-shot answer's failure."""
        stderr.seek(0)
        failure = events.failure(
            returncode=child.returncode,
            stderr=stderr.read().decode("utf-8", errors="replace"),
            out_of_turns_ok=not one_shot,
        )
        if failure is not None:
            raise failure
        result = events.result or {}
        usage = result.get("usage") or {}
        cost = result.get("total_cost_usd")
        text = str(result.get("result") or "".join(events.texts))
        tool_input: dict[str, Any] | None = None
        if one_shot and request.tool is not None:
            structured = events.structured or result.get("structured_output")
            tool_input = structured if isinstance(structured, dict) else answer_json(text)
        return LLMResult(
            text=text,
            tool_input=tool_input,
            raw_tool_input=(json.dumps(tool_input) if tool_input is not None else text) if request.tool else "",
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            model=events.model or self.model or request.model,
            stop_reason=str(result.get("subtype") or ""),
            extra={
                "session_id": result.get("session_id", ""),
                "num_turns": int(result.get("num_turns") or 0),
                "api_retries": events.retries,
            },
            tool_calls=events.tool_calls if not one_shot else [],
            content=events.content if not one_shot else [],
            cache_creation_input_tokens=int(usage.get("cache_creation_input_tokens") or 0),
            cache_read_input_tokens=int(usage.get("cache_read_input_tokens") or 0),
            reported_cost_usd=float(cost) if isinstance(cost, int | float) else None,
        )


def _masked(value: Any, masker: OutputMasker) -> Any:
    """``value`` (content blocks) with the masker applied to every string in it."""
    if isinstance(value, str):
        return masker.mask(value)
    if isinstance(value, list):
        return [_masked(item, masker) for item in value]
    if isinstance(value, dict):
        return {key: _masked(item, masker) for key, item in value.items()}
    return value
