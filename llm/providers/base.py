from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.exceptions import ApplicationError
from core.sandbox_rootfs import ImageRoot
from llm.context_editing import ContextCleared, ContextEditing

ChunkCallback = Callable[[str], None]
CancelCheck = Callable[[], bool]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]

    def as_api(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass
class LLMRequest:
    system: str
    messages: list[dict[str, Any]]
    model: str
    max_tokens: int
    # The tool whose input is the agent's answer ("submit_…").
    tool: Tool | None = None
    # Read-only tools the model may call before answering (repository exploration).
    # Without them ``tool`` is forced; with them the model must call one of the tools,
    # and ``force_answer`` forces ``tool`` (when the exploration is out of turns).
    explore_tools: tuple[Tool, ...] = ()
    force_answer: bool = False
    # Tools whose schema the API itself defines (Anthropic's text editor: ``{"type":
    # "text_editor_20250728", "name": "str_replace_based_edit_tool"}``), sent as given,
    # before the others.
    server_tools: tuple[dict[str, Any], ...] = ()
    # A request without an answer ``tool`` but with tools (``explore_tools`` and/or
    # ``server_tools``) is a conversation: the model calls tools or answers in plain
    # text (``tool_choice`` auto); the loop ends with a reply without tool calls
    # (``stop_reason`` ``end_turn``).
    # Providers with server-side sessions (the Claude CLI) continue this one.
    resume_session: str = ""
    # Prompt caching (where the provider has it, and settings.LLM_PROMPT_CACHING is
    # on): breakpoints on the tools, the system prompt and the last message.
    cache: bool = True
    # Context editing of a long conversation (llm/context_editing.py): old tool results
    # cleared once the prompt passes a threshold — by the API where the provider has it
    # (Anthropic's context management), else by the same rule before sending. None: off.
    context_editing: ContextEditing | None = None
    # A folder the provider's own coding agent edits (providers with
    # ``edits_worktree``: the Claude CLI). The system prompt and the last user message
    # start it; it has only file tools there, plus exactly ``allowed_commands`` as shell
    # commands (a project's test command), for at most ``max_turns`` turns. The result
    # is its summary and usage; the edits are in the folder.
    worktree: str = ""
    allowed_commands: tuple[str, ...] = ()
    max_turns: int = 0
    # The environment ``allowed_commands`` get (a project's variables) — theirs only,
    # never the agent's own process — and the values masked in whatever the agent
    # reports back of them (the secret ones).
    command_variables: tuple[tuple[str, str], ...] = ()
    command_secrets: tuple[str, ...] = ()
    # The repository's base image (core/sandbox_images.py): ``allowed_commands`` run on
    # its tree, as the verify step's do; None: on the server's /usr.
    commands_image: ImageRoot | None = None

    def api_tools(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The request's ``tools`` and ``tool_choice`` for the Messages API."""
        tools = [dict(tool) for tool in self.server_tools] + [tool.as_api() for tool in self.explore_tools]
        if self.tool is None:
            return tools, ({"type": "auto"} if tools else None)
        tools.append(self.tool.as_api())
        if len(tools) > 1 and not self.force_answer:
            return tools, {"type": "any"}
        return tools, {"type": "tool", "name": self.tool.name}


@dataclass
class ToolCall:
    """One ``tool_use`` block of a reply; ``input`` is None when its JSON was broken."""

    id: str
    name: str
    input: dict[str, Any] | None


@dataclass
class LLMResult:
    text: str
    tool_input: dict[str, Any] | None
    raw_tool_input: str
    input_tokens: int
    output_tokens: int
    model: str
    stop_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Every tool call of the reply, and the reply's content blocks as the API takes
    # them back in the next request's messages (a tool-use loop continues with them).
    tool_calls: list[ToolCall] = field(default_factory=list)
    content: list[dict[str, Any]] = field(default_factory=list)
    # Prompt caching: input tokens written to the cache and read from it. They are
    # input tokens beside ``input_tokens``, which counts only the uncached rest.
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    # What the provider itself says the call cost, where it says it (the Claude CLI's
    # editing agent: many model calls, and maybe more than one model, behind one
    # result); when set it is the recorded cost.
    reported_cost_usd: float | None = None
    # Whose price table prices the call (llm/pricing.py), and whether the endpoint is
    # one's own machine or network (a local model: no price per token).
    provider: str = "anthropic"
    local_endpoint: bool = False
    # What context editing cleared from this call's prompt (None: nothing).
    context_cleared: ContextCleared | None = None

    @property
    def all_input_tokens(self) -> int:
        """Every input token of the call: uncached, written to and read from the cache."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def billed_tokens(self) -> int:
        """The call's tokens as they are paid for, in input-token units: cache reads at a
        tenth, writes at 1.25 and output at its own count (a conversation re-reads its
        whole prefix from the cache on every turn; counting those reads in full would end
        a long editing conversation long before it has cost much)."""
        return (
            self.input_tokens
            + (self.cache_creation_input_tokens * 5 + 3) // 4
            + (self.cache_read_input_tokens + 9) // 10
            + self.output_tokens
        )


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """How long an API asked to wait before trying again (``retry-after-ms``, else
    ``retry-after`` in seconds), or None when it did not say (or said it badly)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                return None
    return None


class ProviderError(ApplicationError):
    """A failed LLM call. ``retryable`` errors (rate limits, overload, timeouts) are
    retried with backoff and then pause the run; the others fail it."""

    code = "provider_error"

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message, extra={"retryable": retryable})
        self.retryable = retryable
        self.retry_after = retry_after


class Cancelled(Exception):
    """The call was aborted because the run was cancelled."""


class Provider(Protocol):
    label: str
    # Whether the provider can run a tool-use loop (LLMRequest.explore_tools).
    supports_tools: bool
    # Whether the provider runs a coding agent of its own in a folder
    # (LLMRequest.worktree) instead of a tool-use loop driven by the caller.
    edits_worktree: bool

    def complete(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        """Run one streamed call. Raises ProviderError or Cancelled."""
        ...
