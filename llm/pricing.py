"""What a call costs, in US dollars per million tokens (input, output).

Prices are Anthropic's list prices for the model families; a model not listed is
charged at PRICE_FALLBACK so that spend is never shown as zero by mistake. Settings
can override or extend the table with LLM_PRICES.
"""

from __future__ import annotations

from decimal import Decimal

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


def price_for(model: str) -> tuple[Decimal, Decimal]:
    table = {**PRICES_PER_MILLION, **getattr(settings, "LLM_PRICES", {})}
    # Longest matching prefix, so "claude-sonnet-4-5-20250929" is priced as "claude-sonnet-4-5".
    for name in sorted(table, key=len, reverse=True):
        if model.startswith(name):
            return table[name]
    return PRICE_FALLBACK


def call_cost(
    *,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
) -> Decimal:
    """What one call cost; ``input_tokens`` are the uncached input tokens (as the API
    reports them), the cache writes and reads are priced apart."""
    input_price, output_price = price_for(model)
    cost = (
        input_price * input_tokens
        + input_price * CACHE_WRITE_MULTIPLIER * cache_creation_input_tokens
        + input_price * CACHE_READ_MULTIPLIER * cache_read_input_tokens
        + output_price * output_tokens
    ) / MILLION
    return cost.quantize(Decimal("0.000001"))
