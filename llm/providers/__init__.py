"""LLM providers behind one interface (base.Provider): the Anthropic SDK (also any
Anthropic-compatible endpoint through its base URL), any OpenAI-compatible Chat
Completions endpoint (the openai SDK) and the Claude CLI.

``provider_for`` is the only place a provider is built: pipelines, chat and note
summaries all ask it, so a setting (LLM_PROVIDER, the base URL, timeouts, the demo
label) means the same thing everywhere.
"""

from __future__ import annotations

from django.conf import settings

from .base import Provider

CLAUDE_CLI = "claude-cli"
ANTHROPIC = "anthropic"
OPENAI = "openai"
PROVIDERS = (ANTHROPIC, OPENAI, CLAUDE_CLI)
PROVIDER_LABELS = {ANTHROPIC: "Anthropic", OPENAI: "OpenAI-compatible", CLAUDE_CLI: "Claude CLI"}


def provider_label(name: str) -> str:
    """A provider's name as a page says it."""
    return PROVIDER_LABELS.get(name, name)


def provider_default_model(name: str = "") -> str:
    """The model a provider's calls use when nobody chose one."""
    return settings.OPENAI_MODEL if (name or settings.LLM_PROVIDER) == OPENAI else settings.LLM_MODEL


def provider_for(*, name: str = "", model: str = "", api_key: str = "", base_url: str = "") -> Provider:
    """The client for provider ``name`` (default: settings.LLM_PROVIDER).

    ``api_key`` is a caller's own key (a run started with the user's key, a project's
    endpoint key); without one the server's key for that provider is used. With none,
    the provider is still built and its first call fails with a message that says which
    setting to make: there is no placeholder key that would reach the API and be
    rejected there (but for a local OpenAI-compatible server, which wants none).

    ``base_url`` is a project's own OpenAI-compatible endpoint: checked before every
    call like a forge's host, unless it is the server's own OPENAI_BASE_URL."""
    name = name or settings.LLM_PROVIDER
    if name == OPENAI:
        from .openai_compatible import OpenAICompatibleProvider

        own = bool(base_url) and base_url.rstrip("/") != settings.OPENAI_BASE_URL.rstrip("/")
        return OpenAICompatibleProvider(
            base_url=base_url if own else settings.OPENAI_BASE_URL,
            # The server's key goes only to the server's endpoint.
            api_key=api_key or ("" if own else settings.OPENAI_API_KEY),
            timeout=settings.LLM_TIMEOUT_SECONDS,
            check_host=own,
            local=None if own or not settings.OPENAI_LOCAL_ENDPOINT else True,
            label="Scripted demo" if settings.LLM_DEMO_MODE else "OpenAI-compatible",
        )
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
