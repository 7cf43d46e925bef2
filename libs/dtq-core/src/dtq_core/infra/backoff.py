"""Retry delay math (pure)."""

from __future__ import annotations

import random


def retry_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    jitter: float,
    rng: random.Random | None = None,
) -> float:
    """Delay in seconds before the attempt after ``attempt`` (1-based).

    ``base × 2^(attempt-1)``, with symmetric jitter ``× (1 ± jitter)`` drawn uniformly, and
    never more than ``cap``.
    """
    exp = base * (2.0 ** min(attempt - 1, 62))
    spread = (rng or random).uniform(1 - jitter, 1 + jitter)
    return max(0.0, min(cap, exp * spread))


class Backoff:
    """Capped exponential backoff with jitter for reconnect loops (not for tasks)."""

    def __init__(self, base: float = 0.1, cap: float = 5.0, jitter: float = 0.5) -> None:
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self.failures = 0

    def next(self) -> float:
        self.failures += 1
        return retry_delay(self.failures, base=self.base, cap=self.cap, jitter=self.jitter)

    def reset(self) -> None:
        self.failures = 0
