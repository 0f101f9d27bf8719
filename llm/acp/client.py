"""One prompt turn of a coding agent over ACP, AutoCoder being the client.

``acp_prompt`` speaks to an agent already started (its pipes): ``initialize`` (the
client offers file reads and writes and terminals), ``session/new`` in ``cwd``,
``session/prompt`` with the Coder's prompt, and ``session/cancel`` when the caller
cancels or the deadline passes. While the turn runs, the agent's requests are answered
through the caller's ``AcpHost`` — reading and writing files, running a command,
deciding a permission — and a refusal goes back to the agent as the request's error, so
the agent is told and goes on. Its ``session/update`` notifications are rendered as
text for the live log (messages, thoughts, tool calls, the plan) and its reported usage
and cost are summed. An agent that exits, is not logged in, or writes anything but
JSON-RPC ends the turn with a ``ProviderError`` that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol, cast

from acp import PROTOCOL_VERSION, RequestError
from acp import schema as s
from acp.client.connection import ClientSideConnection

from llm.providers.base import CancelCheck, Cancelled, ProviderError, ToolCall

from .transport import Bridge, PipeTransport

# How long a cancelled agent may take to end its turn before it is stopped.
CANCEL_GRACE_SECONDS = 5.0
AUTH_REQUIRED = -32000
REFUSED_CODE = -32602
AGENT_EXITED = "Error: the coding agent {agent} ended before it finished ({detail})."
AGENT_GARBAGE = "Error: the coding agent {agent} broke the protocol: {detail}."
AGENT_NOT_LOGGED_IN = (
    "Error: the coding agent {agent} is not logged in ({detail}). Give it its API key or log it in on the "
    "server, then Retry."
)
AGENT_REFUSED_SESSION = "Error: the coding agent {agent} refused the session: {detail}."
AGENT_TIMED_OUT = "Error: the coding agent {agent} did not finish within {seconds:g} s and was stopped."


class AcpRefused(Exception):
    """A request the host refuses; ``message`` is what the agent is told."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class CommandRun:
    output: str
    exit_code: int | None
    truncated: bool = False


@dataclass(frozen=True)
class PermissionAsk:
    """What the agent asks leave for: its tool call's kind (edit, execute, …), title,
    the command it would run and the paths it names."""

    kind: str
    title: str
    command: str
    paths: tuple[str, ...]


class AcpHost(Protocol):
    """The caller's answers to the agent's requests (run on the caller's thread). Each
    raises AcpRefused to refuse."""

    def read_text(self, path: str, line: int | None, limit: int | None) -> str: ...

    def write_text(self, path: str, content: str) -> None: ...

    def run_command(self, command: str, args: list[str]) -> CommandRun: ...

    def permit(self, ask: PermissionAsk) -> str | None:
        """None to allow, else why not."""
        ...


@dataclass
class AcpOutcome:
    text: str
    stop_reason: str
    agent_name: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


def acp_prompt(
    process: subprocess.Popen[bytes],
    *,
    stdin: IO[bytes],
    agent: str,
    host: AcpHost,
    cwd: str,
    prompt: str,
    on_text: Callable[[str], None],
    should_cancel: CancelCheck,
    timeout: float,
    stderr_tail: Callable[[], str] = lambda: "",
) -> AcpOutcome:
    """Run one prompt turn with the agent ``process`` (started; its stdout piped, its
    stdin ``stdin``). Raises Cancelled (the caller cancelled) or ProviderError; the
    caller ends the process."""
    return _Session(
        process, stdin=stdin, agent=agent, host=host, cwd=cwd, on_text=on_text, stderr_tail=stderr_tail
    ).run(prompt, should_cancel=should_cancel, timeout=timeout)


class _Session:
    def __init__(
        self,
        process: subprocess.Popen[bytes],
        *,
        stdin: IO[bytes],
        agent: str,
        host: AcpHost,
        cwd: str,
        on_text: Callable[[str], None],
        stderr_tail: Callable[[], str],
    ) -> None:
        self.process, self.agent, self.host, self.cwd = process, agent, host, cwd
        self.on_text, self.stderr_tail = on_text, stderr_tail
        self.bridge = Bridge()
        self.loop = asyncio.new_event_loop()
        assert process.stdout is not None
        self.transport = PipeTransport(stdin, process.stdout, self.loop)
        self.handler = _ClientHandler(self)
        self.conn: ClientSideConnection | None = None
        self.session_id = ""
        self.outcome = AcpOutcome(text="", stop_reason="")
        self.tools: dict[str, dict[str, Any]] = {}
        self.finished = threading.Event()
        self.failure: BaseException | None = None
        self.cancelled_at: float | None = None
        self.timed_out = False

    def run(self, prompt: str, *, should_cancel: CancelCheck, timeout: float) -> AcpOutcome:
        thread = threading.Thread(target=self._loop_main, args=(prompt,), daemon=True, name="acp-session")
        thread.start()
        deadline = time.monotonic() + timeout

        def tick() -> None:
            now = time.monotonic()
            if self.cancelled_at is None and (should_cancel() or now > deadline):
                self.timed_out = now > deadline
                self.cancelled_at = now
                self._cancel()
            elif self.cancelled_at is not None and now > self.cancelled_at + CANCEL_GRACE_SECONDS:
                self.process.kill()  # it did not stop: its pipes close, the session ends

        try:
            self.bridge.serve(done=self.finished.is_set, tick=tick)
        finally:
            self.bridge.drain()
            if self.finished.wait(CANCEL_GRACE_SECONDS + 1):
                thread.join(1)
        if self.timed_out:
            raise ProviderError(AGENT_TIMED_OUT.format(agent=self.agent, seconds=timeout), retryable=True)
        if self.cancelled_at is not None:
            raise Cancelled
        if self.failure is not None:
            raise self._explained(self.failure)
        self.outcome.tool_calls = [
            ToolCall(id=tool_id, name=str(tool.get("title") or tool.get("kind") or "tool"), input=tool.get("input"))
            for tool_id, tool in self.tools.items()
        ]
        return self.outcome

    def _loop_main(self, prompt: str) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._converse(prompt))
        except BaseException as exc:  # noqa: BLE001 - told to the caller's thread, which raises it
            self.failure = exc
        finally:
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()
            self.finished.set()
            self.bridge.wake()

    async def _converse(self, prompt: str) -> None:
        # The handler answers every method the SDK's Client protocol names that an agent may
        # call here; the SDK checks by name at dispatch.
        conn = ClientSideConnection(cast(Any, self.handler), self.transport)
        self.conn = conn
        try:
            capabilities = s.ClientCapabilities(
                fs=s.FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
            )
            init = await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=capabilities,
                client_info=s.Implementation(name="autocoder", title="AutoCoder", version="1"),
            )
            if init.agent_info is not None:
                self.outcome.agent_name = f"{init.agent_info.name} {init.agent_info.version}".strip()
            session = await conn.new_session(cwd=self.cwd, mcp_servers=[])
            self.session_id = session.session_id
            if self.cancelled_at is not None:
                return
            response = await conn.prompt(
                session_id=self.session_id, prompt=[s.TextContentBlock(type="text", text=prompt)]
            )
            self.outcome.stop_reason = response.stop_reason
            if response.usage is not None:
                usage = response.usage
                self.outcome.input_tokens = usage.input_tokens
                self.outcome.output_tokens = usage.output_tokens
                self.outcome.cache_read_tokens = usage.cached_read_tokens or 0
                self.outcome.cache_write_tokens = usage.cached_write_tokens or 0
        finally:
            await conn.close()

    def _cancel(self) -> None:
        if self.conn is None or not self.session_id or self.finished.is_set():
            return
        conn, session_id = self.conn, self.session_id
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(_quietly(conn.cancel(session_id=session_id)), self.loop)

    def _explained(self, failure: BaseException) -> ProviderError:
        detail = self.stderr_tail() or _describe(failure)
        if self.transport.garbage:
            return ProviderError(AGENT_GARBAGE.format(agent=self.agent, detail=self.transport.garbage), retryable=False)
        if isinstance(failure, RequestError):
            text = _describe(failure)
            if failure.code == AUTH_REQUIRED or "auth" in text.lower() or "login" in text.lower():
                return ProviderError(AGENT_NOT_LOGGED_IN.format(agent=self.agent, detail=text), retryable=False)
            return ProviderError(AGENT_REFUSED_SESSION.format(agent=self.agent, detail=text), retryable=False)
        try:  # its pipes closed: it is ending, give it a moment to say how
            status: int | None = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            status = None
        if status is not None:
            detail = f"exit status {status}" + (f": {detail}" if detail else "")
        return ProviderError(AGENT_EXITED.format(agent=self.agent, detail=detail), retryable=False)

    # --- What the agent says: rendered for the live log ------------------------------

    async def say(self, text: str) -> None:
        if text:
            await self.bridge.call(lambda: self.on_text(text))

    def track(self, tool_id: str, **fields: Any) -> dict[str, Any]:
        tool = self.tools.setdefault(tool_id, {})
        tool.update({key: value for key, value in fields.items() if value not in (None, {}, [])})
        return tool


async def _quietly(coroutine: Any) -> None:
    with contextlib.suppress(Exception):
        await coroutine


def _describe(failure: BaseException) -> str:
    if isinstance(failure, RequestError):
        data = failure.data
        detail = data.get("details") or data.get("message") if isinstance(data, dict) else data
        return f"{failure}" + (f": {detail}" if detail else "")
    return str(failure) or type(failure).__name__


def _tool_paths(tool: dict[str, Any]) -> tuple[str, ...]:
    paths = list(tool.get("locations") or [])
    raw = tool.get("input") or {}
    for key in ("file_path", "filePath", "filepath", "path", "notebook_path"):
        if isinstance(raw.get(key), str):
            paths.append(raw[key])
    return tuple(dict.fromkeys(paths))


class _ClientHandler:
    """The SDK's ``Client``: every request the agent makes, answered through the host."""

    def __init__(self, session: _Session) -> None:
        self.session = session
        self.terminals: dict[str, CommandRun] = {}

    def on_connect(self, conn: Any) -> None:
        pass

    async def _host(self, function: Callable[[], Any]) -> Any:
        try:
            return await self.session.bridge.call(function)
        except AcpRefused as refused:
            await self.session.say(f"\n[Refused: {refused.message}]\n")
            raise RequestError(REFUSED_CODE, refused.message) from None

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> s.ReadTextFileResponse:
        content = await self._host(lambda: self.session.host.read_text(path, line, limit))
        return s.ReadTextFileResponse(content=content)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> s.WriteTextFileResponse:
        await self._host(lambda: self.session.host.write_text(path, content))
        return s.WriteTextFileResponse()

    async def create_terminal(
        self, session_id: str, command: str, args: list[str] | None = None, **kwargs: Any
    ) -> s.CreateTerminalResponse:
        # The one command allowed is the project's tests: run to the end here, so the
        # terminal's output and exit are known when the agent asks for them.
        ran = await self._host(lambda: self.session.host.run_command(command, list(args or [])))
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = ran
        return s.CreateTerminalResponse(terminal_id=terminal_id)

    def _terminal(self, terminal_id: str) -> CommandRun:
        if terminal_id not in self.terminals:
            raise RequestError(REFUSED_CODE, f"No terminal {terminal_id}.")
        return self.terminals[terminal_id]

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> s.TerminalOutputResponse:
        ran = self._terminal(terminal_id)
        exit_status = s.TerminalExitStatus(exit_code=ran.exit_code)
        return s.TerminalOutputResponse(output=ran.output, truncated=ran.truncated, exit_status=exit_status)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> s.WaitForTerminalExitResponse:
        return s.WaitForTerminalExitResponse(exit_code=self._terminal(terminal_id).exit_code)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> s.KillTerminalResponse:
        self._terminal(terminal_id)
        return s.KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> s.ReleaseTerminalResponse:
        self.terminals.pop(terminal_id, None)
        return s.ReleaseTerminalResponse()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[s.PermissionOption], **kwargs: Any
    ) -> s.RequestPermissionResponse:
        session = self.session
        tool = session.track(
            tool_call.tool_call_id,
            title=tool_call.title,
            kind=tool_call.kind,
            input=tool_call.raw_input if isinstance(tool_call.raw_input, dict) else None,
            locations=[location.path for location in tool_call.locations or []],
        )
        raw = tool.get("input") or {}
        ask = PermissionAsk(
            kind=str(tool.get("kind") or "other"),
            title=str(tool.get("title") or ""),
            command=str(raw.get("command") or "") if isinstance(raw, dict) else "",
            paths=_tool_paths(tool),
        )
        refusal = await session.bridge.call(lambda: session.host.permit(ask))
        wanted = ("allow_once", "allow_always") if refusal is None else ("reject_once", "reject_always")
        chosen = next((option for kind in wanted for option in options if option.kind == kind), None)
        await session.say(f"\n[Allowed: {ask.title or ask.kind}]\n" if refusal is None else f"\n[Refused: {refusal}]\n")
        if chosen is None:
            return s.RequestPermissionResponse(outcome=s.DeniedOutcome(outcome="cancelled"))
        return s.RequestPermissionResponse(outcome=s.AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        await self.session.say(_rendered(self.session, update))

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


def _rendered(session: _Session, update: Any) -> str:
    """A ``session/update`` as the live log shows it (and the outcome's text/usage)."""
    kind = getattr(update, "session_update", "")
    if kind in ("agent_message_chunk", "agent_thought_chunk"):
        text = getattr(update.content, "text", "") or ""
        if kind == "agent_message_chunk":
            session.outcome.text += text
            return text
        return f"[thinking] {text}" if text else ""
    if kind == "tool_call":
        tool = session.track(
            update.tool_call_id,
            title=update.title,
            kind=update.kind,
            input=update.raw_input if isinstance(update.raw_input, dict) else None,
            locations=[location.path for location in update.locations or []],
        )
        return f"\n[Tool: {tool.get('title') or tool.get('kind') or 'tool'}]\n" if update.raw_input else ""
    if kind == "tool_call_update":
        tool = session.track(
            update.tool_call_id,
            title=update.title,
            kind=update.kind,
            input=update.raw_input if isinstance(update.raw_input, dict) else None,
            status=update.status,
        )
        if update.status in ("completed", "failed"):
            return f"\n[Tool {update.status}: {tool.get('title') or tool.get('kind') or 'tool'}]\n"
        return ""
    if kind == "plan":
        lines = "".join(f"- [{entry.status}] {entry.content}\n" for entry in update.entries)
        return f"\n[Plan]\n{lines}"
    if kind == "usage_update":
        if update.cost is not None and update.cost.currency.upper() == "USD":
            session.outcome.cost_usd = update.cost.amount
        return ""
    return ""
