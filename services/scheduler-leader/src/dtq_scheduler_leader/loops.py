"""The loop shape shared by the leader's duties: wait to lead, act, sleep, back off on errors.

A duty never crashes on a Redis error: the error is logged with its traceback and the duty
tries again after a capped, jittered exponential backoff. A refused promotion
(:class:`StaleLeaderError`) deposes this replica at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
from redis.exceptions import RedisError

from dtq_core.errors import RedisUnavailableError, StaleLeaderError

if TYPE_CHECKING:
    from dtq_scheduler_leader.leader import Leadership

log = structlog.get_logger()

REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisUnavailableError, OSError)
"""What a duty survives: Redis refused, timed out or was unreachable."""

BACKOFF_BASE_S = 0.05
BACKOFF_MAX_S = 2.0
"""Errors are retried quickly at first, and never less often than every 2 s, so a Redis that
comes back is used again within 2 s."""


class Backoff:
    """Capped exponential delays with jitter: each delay is uniform in [cap/2, cap], so
    replicas that failed together do not retry in lockstep."""

    def __init__(self, base_s: float = BACKOFF_BASE_S, max_s: float = BACKOFF_MAX_S) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.failures = 0

    def next_delay(self) -> float:
        cap = min(self.max_s, self.base_s * 2**self.failures)
        self.failures += 1
        return random.uniform(cap / 2, cap)  # noqa: S311 - jitter, not cryptography

    def reset(self) -> None:
        self.failures = 0


def raise_if_cancelled() -> None:
    """Re-raise a cancellation that was requested but swallowed.

    On Python 3.11, ``asyncio.wait_for`` (which redis-py uses to send every command when a
    socket timeout is set) can swallow a cancellation that arrives as the send completes
    (CPython gh-86296, fixed in 3.12). The task then keeps running although it was
    cancelled; every loop here calls this once per round so it ends as it should.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` or until ``stop`` is set; returns whether it was set."""
    raise_if_cancelled()
    if seconds <= 0:
        return stop.is_set()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()


async def wait_any(*events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set."""
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


Step = Callable[[], Awaitable[float]]
"""One pass of a duty; returns how long to sleep before the next pass."""


async def run_while_leader(
    duty: str, leadership: Leadership, stop: asyncio.Event, step: Step
) -> None:
    """Run ``step`` over and over while this replica leads, until ``stop`` is set."""
    backoff = Backoff()
    while not stop.is_set():
        raise_if_cancelled()
        if not await leadership.wait_leading(stop):
            return
        try:
            delay = await step()
            backoff.reset()
        except StaleLeaderError as exc:
            leadership.deposed(exc)
            continue
        except REDIS_ERRORS:
            leadership.metrics.redis_errors.labels(duty).inc()
            delay = backoff.next_delay()
            log.warning("duty_failed", duty=duty, retry_in_s=round(delay, 3), exc_info=True)
        await sleep_or_stop(stop, delay)
