"""The Claude command-line tool as a provider: ``claude -p PROMPT --output-format json``.

The CLI has no forced tool use, so the tool's schema goes into the prompt and the
reply's JSON object is taken as the tool input (the agents validate it as usual).
The child runs in its own process group; a timeout or a cancel kills the group.
Every failure's message starts with "Error: ".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

from .base import CancelCheck, Cancelled, ChunkCallback, LLMRequest, LLMResult, ProviderError

POLL_SECONDS = 0.1
CLI_ENVIRONMENT = frozenset(
    {"PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"}
)
_FENCE = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.S)


def _extract_json(text: str) -> dict[str, Any] | None:
    match = _FENCE.search(text)
    candidates = [match.group(1)] if match else []
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            parsed = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return None


class ClaudeCliProvider:
    label = "Claude CLI"
    # The CLI answers once per call: agents get no exploration tools through it.
    supports_tools = False

    def __init__(self, *, executable: str = "claude", timeout: float = 600, model: str = "") -> None:
        self.executable = executable
        self.timeout = timeout
        self.model = model

    def _prompt(self, request: LLMRequest) -> str:
        parts = [request.system, *(str(m["content"]) for m in request.messages if m.get("role") == "user")]
        if request.tool is not None:
            parts.append(
                f"Answer with only one JSON object, the input of the tool `{request.tool.name}` "
                f"({request.tool.description}), matching this JSON schema:\n" + json.dumps(request.tool.input_schema)
            )
        return "\n\n".join(part for part in parts if part)

    def _command(self, request: LLMRequest) -> list[str]:
        # No tools: the CLI would otherwise read (Read, Grep, Glob) any file the worker
        # can — its .env, the database — at the word of a prompt a user wrote. MCP
        # servers from the CLI's own config are tools too.
        command = [
            self.executable,
            "-p",
            self._prompt(request),
            "--output-format",
            "json",
            "--tools",
            "",
            "--strict-mcp-config",
        ]
        if request.resume_session:
            command += ["--resume", request.resume_session]
        if self.model or request.model:
            command += ["--model", self.model or request.model]
        return command

    def complete(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        if should_cancel():
            raise Cancelled
        # The child gets nothing of the server's environment but what finds the CLI and
        # its own login (under HOME, or CLAUDE_CONFIG_DIR); it works in an empty folder.
        env = {k: v for k, v in os.environ.items() if k in CLI_ENVIRONMENT or k.startswith("CLAUDE_")}
        workdir = tempfile.mkdtemp(prefix="autocoder-claude-cli-")
        try:
            return self._run(request, env, workdir, on_chunk=on_chunk, should_cancel=should_cancel)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run(
        self,
        request: LLMRequest,
        env: dict[str, str],
        workdir: str,
        *,
        on_chunk: ChunkCallback,
        should_cancel: CancelCheck,
    ) -> LLMResult:
        try:
            child = subprocess.Popen(  # noqa: S603 - fixed executable, arguments as a list
                self._command(request),
                cwd=workdir,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise ProviderError(
                f"Error: the Claude CLI ({self.executable}) is not installed or not on PATH.", retryable=False
            ) from None
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                stdout, stderr = child.communicate(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                if should_cancel():
                    self._kill(child)
                    raise Cancelled from None
                if time.monotonic() > deadline:
                    self._kill(child)
                    raise ProviderError(
                        f"Error: the Claude CLI did not finish within {self.timeout:g} s and was stopped.",
                        retryable=True,
                    ) from None
        if child.returncode != 0:
            detail = (stderr or stdout or "").strip().splitlines()[-1:] or ["no output"]
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
            tool_input=_extract_json(text) if request.tool is not None else None,
            raw_tool_input=text if request.tool is not None else "",
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            model=str(payload.get("model") or self.model or request.model),
            stop_reason=str(payload.get("subtype") or ""),
            extra={"session_id": payload.get("session_id", ""), "cost_usd": payload.get("total_cost_usd")},
            cache_creation_input_tokens=int(usage.get("cache_creation_input_tokens") or 0),
            cache_read_input_tokens=int(usage.get("cache_read_input_tokens") or 0),
        )

    @staticmethod
    def _kill(child: subprocess.Popen[str]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=5)
