"""Retry delay math: exponential, symmetric jitter, capped."""

from __future__ import annotations

import random

import pytest

from dtq_core.infra.backoff import Backoff, retry_delay


@pytest.mark.parametrize("attempt", [1, 2, 3, 4, 5, 6])
def test_delay_is_exponential_with_symmetric_jitter(attempt: int) -> None:
    rng = random.Random(attempt)
    base, jitter = 0.5, 0.2
    expected = base * 2 ** (attempt - 1)
    draws = [retry_delay(attempt, base=base, cap=1e9, jitter=jitter, rng=rng) for _ in range(2000)]
    assert min(draws) >= expected * (1 - jitter)
    assert max(draws) <= expected * (1 + jitter)
    # Symmetric: the draws straddle the exponential value, and their mean is close to it.
    assert min(draws) < expected < max(draws)
    assert abs(sum(draws) / len(draws) - expected) < expected * 0.02


def test_delay_never_exceeds_the_cap() -> None:
    rng = random.Random(1)
    draws = [retry_delay(a, base=1, cap=60, jitter=0.2, rng=rng) for a in range(1, 200)]
    assert max(draws) <= 60
    assert draws[-1] >= 60 * 0.8  # at the cap, jitter only lowers the delay


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert retry_delay(10_000, base=1, cap=30, jitter=0, rng=random.Random(0)) == 30


def test_no_jitter_is_exact() -> None:
    assert retry_delay(3, base=0.25, cap=10, jitter=0) == 1.0


def test_reconnect_backoff_grows_and_resets() -> None:
    b = Backoff(base=0.1, cap=1.0, jitter=0)
    assert [b.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next() == 0.1


def test_reconnect_backoff_stays_spread_at_the_cap() -> None:
    """Replicas that failed together must not retry in lockstep, also at the cap."""
    b = Backoff(base=0.05, cap=2.0, jitter=0.5)
    draws = [b.next() for _ in range(200)]
    assert all(0.025 <= d <= 2.0 for d in draws)
    at_cap = draws[20:]
    assert min(at_cap) >= 1.0
    assert len(set(at_cap)) > 100
