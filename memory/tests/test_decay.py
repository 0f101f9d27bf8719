"""compute_confidence: a pure function of policy, clock and an explicit now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory.decay import compute_confidence, compute_confidence_array
from memory.models.semantic import DecayPolicy

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.mark.parametrize("age_hours", [0, 1, 100, 10_000])
def test_permanent_is_always_certain(age_hours: int) -> None:
    then = NOW - age_hours * HOUR
    assert compute_confidence(DecayPolicy.PERMANENT, then, then, 1.0, NOW) == 1.0


@pytest.mark.parametrize(
    ("age_hours", "expected"),
    [(0, 1.0), (6, 0.75), (12, 0.5), (18, 0.25), (24, 0.0), (25, 0.0), (10_000, 0.0)],
)
def test_contextual_fades_linearly_from_creation(age_hours: float, expected: float) -> None:
    created = NOW - age_hours * HOUR
    # Reinforcing does not help a contextual memory: its clock is its creation.
    assert compute_confidence(DecayPolicy.CONTEXTUAL, created, NOW, 24.0, NOW) == pytest.approx(expected)


def test_reinforceable_fades_from_last_reinforcement() -> None:
    created = NOW - 1000 * HOUR
    assert compute_confidence(DecayPolicy.REINFORCEABLE, created, NOW - 12 * HOUR, 24.0, NOW) == pytest.approx(0.5)
    assert compute_confidence(DecayPolicy.REINFORCEABLE, created, NOW, 24.0, NOW) == 1.0
    assert compute_confidence(DecayPolicy.REINFORCEABLE, created, NOW - 48 * HOUR, 24.0, NOW) == 0.0


def test_never_negative_and_never_above_one() -> None:
    far_past = NOW - 10**6 * HOUR
    assert compute_confidence(DecayPolicy.REINFORCEABLE, far_past, far_past, 0.5, NOW) == 0.0
    future = NOW + 5 * HOUR  # a clock skewed ahead of ours
    assert compute_confidence(DecayPolicy.CONTEXTUAL, future, future, 24.0, NOW) == 1.0


def test_zero_half_life_means_gone_at_once() -> None:
    assert compute_confidence(DecayPolicy.CONTEXTUAL, NOW, NOW, 0.0, NOW) == 0.0


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="Unknown decay policy"):
        compute_confidence("sometimes", NOW, NOW, 1.0, NOW)


def test_vectorised_form_agrees_with_the_pure_function() -> None:
    cases = [
        (DecayPolicy.PERMANENT, 50.0, 10.0),
        (DecayPolicy.CONTEXTUAL, 5.0, 10.0),
        (DecayPolicy.REINFORCEABLE, 9.99, 10.0),
        (DecayPolicy.REINFORCEABLE, 11.0, 10.0),
        (DecayPolicy.CONTEXTUAL, -3.0, 10.0),
    ]
    starts = [NOW - age * HOUR for _, age, _ in cases]
    expected = [compute_confidence(p, s, s, h, NOW) for (p, _, h), s in zip(cases, starts, strict=True)]
    got = compute_confidence_array(
        np.array([p == DecayPolicy.PERMANENT for p, _, _ in cases]),
        np.array([s.timestamp() for s in starts]),
        np.array([h for _, _, h in cases]),
        NOW.timestamp(),
    )
    assert got.tolist() == pytest.approx(expected)
