"""The Claude command-line tool as a provider: ``claude -p PROMPT --output-format json``.

The CLI has no forced tool use, so the tool's schema goes into the prompt and the
reply's JSON object is taken as the tool input (the agents validate it as usual):
claude_cli_prompt.py. Every failure's message starts with "Error: ".

A request with a ``worktree`` is the Coder editing it (``edits_worktree``): the CLI
runs there as an agent with its own file tools only (Read, Edit, MultiEdit, Write,
Glob, Grep; Bash for exactly ``autocoder-run-tests``, which runs the project's test
command in a sandbox of its own, if there is one; no web tools, no MCP servers; only
what ``--allowedTools`` names runs), streaming its events (``--output-format
stream-json``) into the live log.

Every call — the Coder's and the one-shot answers of the Planner, the Reviewer and the
assistant alike — runs in the sandbox (llm/providers/claude_cli_sandbox.py: no network
but the API through a relay, a private config folder removed afterwards, the login in
the CLI's environment only), started and read by claude_cli_process.py; a timeout or a
cancel kills it. Where no sandbox can be
made it does not run (SandboxUnavailable); with the operator's
``UNSAFE_RUN_TESTS_WITHOUT_SANDBOX`` it runs unsandboxed (with a private config folder
still), saying so.
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

from .base import CancelCheck, Cancelled, ChunkCallback, LLMRequest, LLMResult, ProviderError, ToolCall
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
# The Coder's tools in the CLI: its own file tools. No web tools, no subagents (Task),
# no shell but the project's test command (as TEST_RUNNER, in a sandbox of its own).
EDIT_TOOLS = ("Read", "Edit", "MultiEdit", "Write", "Glob", "Grep")
DENIED_TOOLS = ("WebFetch", "WebSearch", "Task", "NotebookEdit")
SANDBOX_HOME_RULE = "//" + SANDBOX_HOME.lstrip("/") + "/**"
OUT_OF_TURNS_SUBTYPE = "error_max_turns"
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
    ) -> None:
        self.executable = executable
        self.timeout = timeout
        self.model = model
        self.sandbox_paths = sandbox_paths

    def _command(self, request: LLMRequest, executable: str) -> list[str]:
        # No tools: the CLI would otherwise read (Read, Grep, Glob) any file the worker
        # can — its .env, the database — at the word of a prompt a user wrote. MCP
        # servers from the CLI's own config are tools too.
        command = [
            executable,
            "-p",  # the prompt comes on stdin: it can outgrow an argument, and argv is public
            "--output-format",
            "json",
            "--tools",
            "",
            "--strict-mcp-config",
        ]
        if self.model or request.model:
            command += ["--model", self.model or request.model]
        return command

    def complete(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        if should_cancel():
            raise Cancelled
        if request.worktree:
            return self._edit(request, on_chunk=on_chunk, should_cancel=should_cancel)
        # The child gets nothing of the server's environment but what finds the CLI and
        # its own login, in a sandbox of its own (no tools, no files: an empty working
        # folder, a private config folder removed afterwards).
        env = _cli_environment()
        status = sandbox_status()
        if not status.available:
            raise SandboxUnavailable(status.message)
        located = shutil.which(self.executable)
        if located is None:
            raise ProviderError(
                f"Error: the Claude CLI ({self.executable}) is not installed or not on PATH.", retryable=False
            )
        executable = os.path.realpath(located)
        workdir = Path(tempfile.mkdtemp(prefix="autocoder-claude-cli-"))
        try:
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
                    return self._answer(request, child, stderr, should_cancel=should_cancel, on_chunk=on_chunk)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _answer(
        self,
        request: LLMRequest,
        child: subprocess.Popen[bytes],
        stderr: IO[bytes],
        *,
        on_chunk: ChunkCallback,
        should_cancel: CancelCheck,
    ) -> LLMResult:
        deadline = time.monotonic() + self.timeout
        output = b"".join(line.encode("utf-8") + b"\n" for line in output_lines(child, deadline, should_cancel))
        cli_finished(child, deadline, self.timeout, should_cancel)
        stdout = output.decode("utf-8", errors="replace")
        if child.returncode != 0:
            stderr.seek(0)
            errors = stderr.read().decode("utf-8", errors="replace")
            detail = (errors or stdout or "").strip().splitlines()[-1:] or ["no output"]
            raise ProviderError(f"Error: the Claude CLI exited with {child.returncode}: {detail[0]}", retryable=False)
        try:
            payload = json.loads(stdout)
        except json.JSONDecodeError:
            raise ProviderError("Error: the Claude CLI printed something that is not JSON.", retryable=False) from None
        if payload.get("is_error"):
            raise ProviderError(
                f"Error: {payload.get('result') or 'the Claude CLI reported an error'}", retryable=False
            )
        text = str(payload.get("result", ""))
        on_chunk(text)
        usage = payload.get("usage") or {}
        return LLMResult(
            text=text,
            tool_input=answer_json(text) if request.tool is not None else None,
            raw_tool_input=text if request.tool is not None else "",
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            model=str(payload.get("model") or self.model or request.model),
            stop_reason=str(payload.get("subtype") or ""),
            extra={"session_id": payload.get("session_id", ""), "cost_usd": payload.get("total_cost_usd")},
            cache_creation_input_tokens=int(usage.get("cache_creation_input_tokens") or 0),
            cache_read_input_tokens=int(usage.get("cache_read_input_tokens") or 0),
        )

    # --- The Coder editing a worktree --------------------------------------------------

    def edit_command(self, request: LLMRequest, executable: str) -> list[str]:
        """The CLI as the Coder: its file tools only, and the test command as the one
        shell command (``TEST_RUNNER``, which runs it in a sandbox of its own). Only what
        ``--allowedTools`` names runs (``dontAsk``: not even the commands
        ``acceptEdits`` lets through, ``mkdir``, ``sed -i``…, whose shell holds the login)."""
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
        located = shutil.which(self.executable)
        if located is None:
            raise ProviderError(
                f"Error: the Claude CLI ({self.executable}) is not installed or not on PATH.", retryable=False
            )
        executable = os.path.realpath(located)
        env = _cli_environment()
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
                result = self._stream(request, child, stderr, on_chunk=on_masked_chunk, should_cancel=should_cancel)
        if masker:
            result.text = masker.mask(result.text)
            result.content = _masked(result.content, masker)
        return result

    def _stream(
        self,
        request: LLMRequest,
        child: subprocess.Popen[bytes],
        stderr: IO[bytes],
        *,
        on_chunk: ChunkCallback,
        should_cancel: CancelCheck,
    ) -> LLMResult:
        """Read the CLI's events as they come; the result event is the call's result."""
        events = _EditEvents(on_chunk)
        deadline = time.monotonic() + self.timeout
        for line in output_lines(child, deadline, should_cancel):
            events.take(line)
        cli_finished(child, deadline, self.timeout, should_cancel)
        result = events.result
        if result is None:
            stderr.seek(0)
            lines = stderr.read().decode("utf-8", errors="replace").strip().splitlines()
            detail = lines[-1] if lines else "no result"
            raise ProviderError(f"Error: the Claude CLI exited with {child.returncode}: {detail}", retryable=False)
        subtype = str(result.get("subtype") or "")
        if result.get("is_error") and subtype != OUT_OF_TURNS_SUBTYPE:
            raise ProviderError(
                f"Error: {result.get('result') or 'the Claude CLI reported an error'} ({subtype})", retryable=False
            )
        usage = result.get("usage") or {}
        cost = result.get("total_cost_usd")
        return LLMResult(
            text=str(result.get("result") or "".join(events.texts)),
            tool_input=None,
            raw_tool_input="",
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            model=events.model or self.model or request.model,
            stop_reason=subtype,
            extra={"session_id": result.get("session_id", ""), "num_turns": int(result.get("num_turns") or 0)},
            tool_calls=events.tool_calls,
            content=events.content,
            cache_creation_input_tokens=int(usage.get("cache_creation_input_tokens") or 0),
            cache_read_input_tokens=int(usage.get("cache_read_input_tokens") or 0),
            reported_cost_usd=float(cost) if isinstance(cost, int | float) else None,
        )


class _EditEvents:
    """The CLI's stream-json events, written to the live log as they arrive: the
    assistant's text, each tool call (``→ Edit {"file_path": …}``) and the first line
    of its result."""

    def __init__(self, on_chunk: ChunkCallback) -> None:
        self.on_chunk = on_chunk
        self.model = ""
        self.texts: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.content: list[dict[str, Any]] = []
        self.result: dict[str, Any] | None = None

    def take(self, line: str) -> None:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return  # not an event (a stray line of output)
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            self.model = str(event.get("model") or "")
        elif kind == "assistant":
            for block in _blocks(event):
                self.content.append(block)
                if block.get("type") == "text" and block.get("text"):
                    self.texts.append(str(block["text"]))
                    self.on_chunk(str(block["text"]))
                elif block.get("type") == "tool_use":
                    tool_input = block.get("input") if isinstance(block.get("input"), dict) else None
                    self.tool_calls.append(ToolCall(str(block.get("id", "")), str(block.get("name", "")), tool_input))
                    arguments = json.dumps(tool_input or {}, ensure_ascii=False)[:200]
                    self.on_chunk(f"\n→ {block.get('name', '?')} {arguments}\n")
        elif kind == "user":
            for block in _blocks(event):
                if block.get("type") == "tool_result":
                    text = _result_text(block.get("content")) or "(empty)"
                    first = text.splitlines()[0][:200] if text.strip() else "(empty)"
                    self.on_chunk(f"  {'error: ' if block.get('is_error') else ''}{first}\n")
        elif kind == "result":
            self.result = event


def _blocks(event: dict[str, Any]) -> list[dict[str, Any]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _masked(value: Any, masker: OutputMasker) -> Any:
    """``value`` (content blocks) with the masker applied to every string in it."""
    if isinstance(value, str):
        return masker.mask(value)
    if isinstance(value, list):
        return [_masked(item, masker) for item in value]
    if isinstance(value, dict):
        return {key: _masked(item, masker) for key, item in value.items()}
    return value


def _cli_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in CLI_ENVIRONMENT or k.startswith("CLAUDE_")}
