"""Coding agents over ACP as a provider: the registry (``ACP_AGENTS``) and ``AcpProvider``.

An ACP agent is a program installed from the pinned manifest in ``tools/acp-agents``
(``npm ci --prefix tools/acp-agents``) and named in the setting ``ACP_AGENTS``: its
command line, which API it talks to (``anthropic``: the server's Anthropic key or the
run's, ``ANTHROPIC_BASE_URL``; ``openai``: an OpenAI-compatible endpoint,
``ACP_OPENAI_BASE_URL``/``ACP_OPENAI_API_KEY``/``ACP_OPENAI_MODEL``) and any fixed
variables it needs (its config file). Like the Claude CLI it edits a worktree itself
(``edits_worktree``): one call is one prompt turn of the agent, started in its sandbox
(sandbox.py), its files and its command answered through the caller's host
(llm/acp/client.py). The result is its final message, with the usage and cost where it
reports them.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from core.sandbox_bwrap import SANDBOX_ROOT
from llm.providers.base import CancelCheck, ChunkCallback, LLMRequest, LLMResult, ProviderError

from .client import AGENT_NOT_LOGGED_IN, AcpHost, acp_prompt
from .sandbox import AgentLaunch, acp_agent_started

BUILT_IN = "built-in"
ANTHROPIC_API = "anthropic"
OPENAI_API = "openai"
UNKNOWN_AGENT = "Error: there is no coding agent {name!r} (ACP_AGENTS names {known})."
NOT_INSTALLED = (
    "Error: the coding agent {name} is not installed ({command} not found): run `npm ci --prefix tools/acp-agents`."
)
STDERR_TAIL_CHARS = 400
# The Coder's role says the test command is "named below": it is, here (an ACP agent has
# no tool of ours that would run it for it).
TEST_COMMAND_HINT = "The project's test command, the one shell command you may run: `{command}`."
NO_TEST_COMMAND_HINT = "This project has no test command: do not run any shell command."


@dataclass(frozen=True)
class AcpAgent:
    name: str
    label: str
    command: tuple[str, ...]
    api: str
    env: dict[str, str]
    paths: tuple[str, ...]


def acp_agents() -> dict[str, AcpAgent]:
    """The registry, from settings.ACP_AGENTS (checked at start-up)."""
    return {
        name: AcpAgent(
            name=name,
            label=str(entry.get("label") or name),
            command=tuple(entry["command"]),
            api=str(entry.get("api") or ANTHROPIC_API),
            env=dict(entry.get("env") or {}),
            paths=tuple(entry.get("paths") or ()),
        )
        for name, entry in settings.ACP_AGENTS.items()
    }


def acp_agent(name: str) -> AcpAgent:
    agents = acp_agents()
    if name not in agents:
        raise ProviderError(UNKNOWN_AGENT.format(name=name, known=", ".join(sorted(agents)) or "none"), retryable=False)
    return agents[name]


def agent_launch(agent: AcpAgent, *, api_key: str) -> AgentLaunch:
    """What the agent is started with: its API's address and key, nothing of the
    server's own environment."""
    environment = {"NO_COLOR": "1", **agent.env}
    if agent.api == OPENAI_API:
        api_url = settings.ACP_OPENAI_BASE_URL
        key = settings.ACP_OPENAI_API_KEY
        environment |= {"AUTOCODER_OPENAI_BASE_URL": api_url, "AUTOCODER_OPENAI_MODEL": settings.ACP_OPENAI_MODEL}
        secrets = {"AUTOCODER_OPENAI_API_KEY": key}
    else:
        api_url = settings.ANTHROPIC_BASE_URL or "https://api.anthropic.com"
        key = api_key or settings.ANTHROPIC_API_KEY
        if settings.ANTHROPIC_BASE_URL:
            environment["ANTHROPIC_BASE_URL"] = settings.ANTHROPIC_BASE_URL
        # Claude Code looks up its vendor's hosts for telemetry unless told not to.
        environment["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
        secrets = {"ANTHROPIC_API_KEY": key}
    if not key or not api_url:
        raise ProviderError(AGENT_NOT_LOGGED_IN.format(agent=agent.name, detail="no API key is set"), retryable=False)
    return AgentLaunch(
        command=agent.command, environment=environment, secrets=secrets, api_url=api_url, paths=agent.paths
    )


class AcpProvider:
    """One ACP agent editing ``request.worktree``; ``host`` answers its requests."""

    supports_tools = False
    edits_worktree = True

    def __init__(self, *, agent: AcpAgent, host: AcpHost, api_key: str, timeout: float, sandboxed: bool) -> None:
        self.agent = agent
        self.label = agent.label
        self.host = host
        self.api_key = api_key
        self.timeout = timeout
        self.sandboxed = sandboxed

    def complete(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        launch = agent_launch(self.agent, api_key=self.api_key)
        executable = Path(launch.command[0])
        if not executable.exists():
            raise ProviderError(NOT_INSTALLED.format(name=self.agent.name, command=executable), retryable=False)
        worktree = Path(request.worktree)
        # ACP has no system prompt: the Coder's instructions lead the one prompt.
        last = request.messages[-1]["content"]
        task = last if isinstance(last, str) else "\n\n".join(_texts(last))
        system = "\n\n".join(filter(None, [request.system, _test_command_hint(request)]))
        prompt = f"{system}\n\n---\n\n{task}" if system else task
        with tempfile.TemporaryFile() as stderr:

            def stderr_tail() -> str:
                stderr.flush()
                stderr.seek(0)
                lines = stderr.read().decode("utf-8", errors="replace").strip().splitlines()
                return lines[-1][:STDERR_TAIL_CHARS] if lines else ""

            # SandboxUnavailable (nothing started) goes up as it is: the run pauses saying why.
            started = acp_agent_started(
                launch, workspace=worktree, stderr=stderr, timeout=self.timeout, sandboxed=self.sandboxed
            )
            with started as agent:
                outcome = acp_prompt(
                    agent.process,
                    stdin=agent.stdin,
                    agent=self.agent.name,
                    host=self.host,
                    cwd=SANDBOX_ROOT if self.sandboxed else str(worktree),
                    prompt=prompt,
                    on_text=on_chunk,
                    should_cancel=should_cancel,
                    timeout=self.timeout,
                    stderr_tail=stderr_tail,
                )
        return LLMResult(
            text=outcome.text,
            tool_input=None,
            raw_tool_input="",
            input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens,
            cache_creation_input_tokens=outcome.cache_write_tokens,
            cache_read_input_tokens=outcome.cache_read_tokens,
            model=f"acp:{self.agent.name}",
            stop_reason=outcome.stop_reason,
            tool_calls=outcome.tool_calls,
            reported_cost_usd=outcome.cost_usd,
            extra={"agent": outcome.agent_name or self.agent.name},
        )


def _test_command_hint(request: LLMRequest) -> str:
    if request.allowed_commands:
        return TEST_COMMAND_HINT.format(command=request.allowed_commands[0])
    return NO_TEST_COMMAND_HINT


def _texts(content: list[dict[str, Any]]) -> list[str]:
    return [str(block.get("text") or "") for block in content if block.get("type") == "text"]
