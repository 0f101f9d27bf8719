from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.exceptions import ApplicationError

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
    tool: Tool | None = None
    # Providers with server-side sessions (the Claude CLI) continue this one.
    resume_session: str = ""


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

    def complete(self, request: LLMRequest, *, on_chunk: ChunkCallback, should_cancel: CancelCheck) -> LLMResult:
        """Run one streamed call. Raises ProviderError or Cancelled."""
        ...
