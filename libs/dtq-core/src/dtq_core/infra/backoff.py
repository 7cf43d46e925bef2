"""Delay math (pure): a task's retry delay, and the backoff of loops that retry Redis."""

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
    """Capped exponential delays with jitter for loops that retry Redis (not for tasks:
    those use :func:`retry_delay`).

    The ``n``-th delay in a row is drawn uniformly from ``[c × (1 - jitter), c]`` where
    ``c = min(cap, base × 2^(n-1))``: it grows quickly while Redis stays away, is never
    longer than ``cap`` (so a Redis that comes back is used again within ``cap`` seconds),
    and stays spread at the cap, so replicas that failed together do not retry in lockstep.

    Verbs: :meth:`next` after a failure, :meth:`reset` after a success.
    """

    def __init__(self, base: float = 0.1, cap: float = 5.0, jitter: float = 0.5) -> None:
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self.failures = 0

    def next(self) -> float:
        """The delay before the next try, counting one more failure in a row."""
        self.failures += 1
        ceiling = min(self.cap, self.base * (2.0 ** min(self.failures - 1, 62)))
        low = ceiling * (1 - self.jitter)
        return random.uniform(low, ceiling)  # noqa: S311 - jitter, not cryptography

    def reset(self) -> None:
        """Forget the failures: the next failure waits ``base`` again."""
        self.failures = 0
