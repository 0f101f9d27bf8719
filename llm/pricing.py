"""What a call costs, in US dollars per million tokens (input, output).

Prices are Anthropic's list prices for the model families; a model not listed is
charged at PRICE_FALLBACK so that spend is never shown as zero by mistake. Settings
can override or extend the table with LLM_PRICES.

OpenAI-compatible endpoints have their own table (input, output, cached input), in the
same USD fields, so runs on either are compared as they are: a model not listed is
charged at OPENAI_PRICE_FALLBACK, never 0, and ``price_known`` says the figure is an
estimate (the run page says so); a local endpoint (loopback or private addresses, or
OPENAI_LOCAL_ENDPOINT) costs nothing per token. OPENAI_PRICES extends that table.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings

PRICES_PER_MILLION: dict[str, tuple[Decimal, Decimal]] = {
    "claude-opus-4": (Decimal("15"), Decimal("75")),
    "claude-opus-4-1": (Decimal("15"), Decimal("75")),
    "claude-opus-4-5": (Decimal("5"), Decimal("25")),
    "claude-sonnet-4": (Decimal("3"), Decimal("15")),
    "claude-sonnet-4-5": (Decimal("3"), Decimal("15")),
    "claude-sonnet-4-6": (Decimal("3"), Decimal("15")),
    "claude-haiku-4-5": (Decimal("1"), Decimal("5")),
    "claude-3-5-haiku": (Decimal("0.8"), Decimal("4")),
}
PRICE_FALLBACK = (Decimal("3"), Decimal("15"))
# Prompt caching (5-minute cache): a token written to the cache costs 1.25x the
# model's input price, a token read from it 0.1x.
CACHE_WRITE_MULTIPLIER = Decimal("1.25")
CACHE_READ_MULTIPLIER = Decimal("0.1")
MILLION = Decimal(1_000_000)


# OpenAI's list prices (input, output, cached input) per million tokens.
OPENAI_PRICES_PER_MILLION: dict[str, tuple[Decimal, Decimal, Decimal]] = {
    "gpt-4.1": (Decimal("2"), Decimal("8"), Decimal("0.5")),
    "gpt-4.1-mini": (Decimal("0.4"), Decimal("1.6"), Decimal("0.1")),
    "gpt-4.1-nano": (Decimal("0.1"), Decimal("0.4"), Decimal("0.025")),
    "gpt-4o": (Decimal("2.5"), Decimal("10"), Decimal("1.25")),
    "gpt-4o-mini": (Decimal("0.15"), Decimal("0.6"), Decimal("0.075")),
    "gpt-5": (Decimal("1.25"), Decimal("10"), Decimal("0.125")),
    "gpt-5-mini": (Decimal("0.25"), Decimal("2"), Decimal("0.025")),
    "o4-mini": (Decimal("1.1"), Decimal("4.4"), Decimal("0.275")),
}
OPENAI_PRICE_FALLBACK = OPENAI_PRICES_PER_MILLION["gpt-4.1"]
OPENAI = "openai"


def _longest_prefix(table: dict[str, Any], model: str) -> Any:
    # Longest matching prefix, so "claude-sonnet-4-5-20250929" is priced as "claude-sonnet-4-5".
    for name in sorted(table, key=len, reverse=True):
        if model.startswith(name):
            return table[name]
    return None


def _openai_table() -> dict[str, tuple[Decimal, Decimal, Decimal]]:
    extra = getattr(settings, "OPENAI_PRICES", {})
    table = dict(OPENAI_PRICES_PER_MILLION)
    for name, (input_price, output_price, cached_price) in extra.items():
        table[name] = (Decimal(str(input_price)), Decimal(str(output_price)), Decimal(str(cached_price)))
    return table


def _openai_model(model: str) -> str:
    # A router's name for it ("openai/gpt-4.1" on OpenRouter, LiteLLM) is the same model.
    return model.rsplit("/", 1)[-1]


def price_for(model: str) -> tuple[Decimal, Decimal]:
    table = {**PRICES_PER_MILLION, **getattr(settings, "LLM_PRICES", {})}
    return _longest_prefix(table, model) or PRICE_FALLBACK


def _openai_price(model: str) -> tuple[Decimal, Decimal, Decimal] | None:
    """An OpenAI-compatible model's (input, output, cached input) price: OpenAI's table,
    or, for a Claude model behind a router ("anthropic/claude-sonnet-4-5" on OpenRouter),
    Anthropic's, its cache reads at CACHE_READ_MULTIPLIER."""
    name = _openai_model(model)
    price = _longest_prefix(_openai_table(), name)
    if price is not None:
        return price
    claude = _longest_prefix({**PRICES_PER_MILLION, **getattr(settings, "LLM_PRICES", {})}, name)
    return (claude[0], claude[1], claude[0] * CACHE_READ_MULTIPLIER) if claude else None


def price_known(*, model: str, provider: str = "anthropic", local: bool = False) -> bool:
    """Whether ``model`` has a price of its own (else its cost is the fallback's estimate)."""
    if provider == OPENAI:
        return local or _openai_price(model) is not None
    return _longest_prefix({**PRICES_PER_MILLION, **getattr(settings, "LLM_PRICES", {})}, model) is not None


def _openai_cost(*, model: str, input_tokens: int, output_tokens: int, cache_read_input_tokens: int) -> Decimal:
    input_price, output_price, cached_price = _openai_price(model) or OPENAI_PRICE_FALLBACK
    return (
        input_price * input_tokens + cached_price * cache_read_input_tokens + output_price * output_tokens
    ) / MILLION


def call_cost(
    *,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
    provider: str = "anthropic",
    local: bool = False,
) -> Decimal:
    """What one call cost; ``input_tokens`` are the uncached input tokens (as the API
    reports them), the cache writes and reads are priced apart. ``provider`` "openai"
    prices by the OpenAI-compatible table; ``local`` (an endpoint of one's own) is free."""
    if provider == OPENAI:
        if local:
            return Decimal("0.000000")
        cost = _openai_cost(
            model=model,
            input_tokens=input_tokens + cache_creation_input_tokens,
            output_tokens=output_tokens,
            cache_read_input_tokens=cache_read_input_tokens,
        )
        return cost.quantize(Decimal("0.000001"))
    input_price, output_price = price_for(model)
    cost = (
        input_price * input_tokens
        + input_price * CACHE_WRITE_MULTIPLIER * cache_creation_input_tokens
        + input_price * CACHE_READ_MULTIPLIER * cache_read_input_tokens
        + output_price * output_tokens
    ) / MILLION
    return cost.quantize(Decimal("0.000001"))
