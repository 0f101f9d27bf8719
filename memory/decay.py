"""How sure we still are of a semantic memory: a pure function of its policy and clock.

permanent      → always 1.0
contextual     → fades linearly from ``created_at`` to 0 after one half-life
reinforceable  → the same, from ``last_reinforced_at`` (reinforcing resets the clock)

Never stored: computed at read time from an explicit ``now``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from memory.models.semantic import DecayPolicy

SECONDS_PER_HOUR = 3600.0


def _linear(age_hours: float, half_life_hours: float) -> float:
    if half_life_hours <= 0:
        return 0.0
    # A clock in the future (skew between processes) counts as age 0, not above 1.
    age_hours = max(0.0, age_hours)
    return max(0.0, 1.0 - age_hours / half_life_hours)


def compute_confidence(
    policy: str,
    created_at: datetime,
    last_reinforced_at: datetime,
    half_life_hours: float,
    now: datetime,
) -> float:
    """Confidence in [0, 1]."""
    if policy == DecayPolicy.PERMANENT:
        return 1.0
    if policy == DecayPolicy.CONTEXTUAL:
        start = created_at
    elif policy == DecayPolicy.REINFORCEABLE:
        start = last_reinforced_at
    else:
        raise ValueError(f"Unknown decay policy: {policy!r}")
    return _linear((now - start).total_seconds() / SECONDS_PER_HOUR, half_life_hours)


def fades_at(
    policy: str, created_at: datetime, last_reinforced_at: datetime, half_life_hours: float
) -> datetime | None:
    """When the confidence reaches 0 — the memory has faded: search scores it 0, recall
    and the memory list leave it out — or None for a permanent memory."""
    if policy == DecayPolicy.PERMANENT:
        return None
    return clock_start(policy, created_at, last_reinforced_at) + timedelta(hours=max(0.0, half_life_hours))


def clock_start(policy: str, created_at: datetime, last_reinforced_at: datetime) -> datetime:
    """The moment a memory's decay is measured from (permanent ones: irrelevant)."""
    return created_at if policy == DecayPolicy.CONTEXTUAL else last_reinforced_at


def compute_confidence_array(
    permanent: np.ndarray, start_ts: np.ndarray, half_life_hours: np.ndarray, now_ts: float
) -> np.ndarray:
    """compute_confidence over many memories at once, in numpy: the benchmark's ranking
    worked out in memory (bench/bench_memory_search.py). Search computes the confidence
    in SQL instead (memory.vector_store.MemoryConfidence).

    ``start_ts`` are POSIX seconds of each memory's clock_start.
    """
    age_hours = np.maximum(0.0, (now_ts - start_ts) / SECONDS_PER_HOUR)
    with np.errstate(divide="ignore", invalid="ignore"):
        fading = np.where(half_life_hours > 0, np.maximum(0.0, 1.0 - age_hours / half_life_hours), 0.0)
    return np.where(permanent, 1.0, fading)
