"""LLM providers behind one interface (base.Provider): the Anthropic SDK (also any
Anthropic-compatible endpoint through its base URL) and the Claude CLI.

``provider_for`` is the only place a provider is built: pipelines, chat and note
summaries all ask it, so a setting (LLM_PROVIDER, the base URL, timeouts, the demo
label) means the same thing everywhere.
"""

from __future__ import annotations

from django.conf import settings

from .base import Provider

CLAUDE_CLI = "claude-cli"
ANTHROPIC = "anthropic"


def provider_for(*, name: str = "", model: str = "", api_key: str = "") -> Provider:
    """The client for provider ``name`` (default: settings.LLM_PROVIDER).

    ``api_key`` is a caller's own key (a run started with the user's key); without one
    the server's ANTHROPIC_API_KEY is used. With neither, the provider is still built
    and its first call fails with a message that says which setting to make: there is
    no placeholder key that would reach the API and be rejected there."""
    name = name or settings.LLM_PROVIDER
    if name == CLAUDE_CLI:
        from .claude_cli import ClaudeCliProvider

        return ClaudeCliProvider(
            executable=settings.CLAUDE_CLI_PATH,
            timeout=settings.CLAUDE_CLI_TIMEOUT_SECONDS,
            model=model or settings.LLM_MODEL,
            sandbox_paths=tuple(settings.CLAUDE_CLI_SANDBOX_PATHS),
            # The CLI logs in with the key and API the server is configured with (never
            # another of its secrets); without a key, with the operator's login of it.
            api_key=api_key or settings.ANTHROPIC_API_KEY,
            base_url=settings.ANTHROPIC_BASE_URL,
        )
    from .anthropic import AnthropicProvider

    return AnthropicProvider(
        api_key=api_key or settings.ANTHROPIC_API_KEY,
        base_url=settings.ANTHROPIC_BASE_URL or None,
        timeout=settings.LLM_TIMEOUT_SECONDS,
        label="Scripted demo" if settings.LLM_DEMO_MODE else "Anthropic",
        prompt_caching=settings.LLM_PROMPT_CACHING,
    )
