"""The loop shape of the leader's duties: wait to lead, act, sleep, back off on errors.

A duty never crashes on a Redis error: :func:`dtq_core.infra.loops.run_supervised` logs it
with its traceback and the duty tries again after a capped, jittered exponential backoff. A
refused promotion (:class:`~dtq_core.errors.StaleLeaderError`: a newer epoch has acted)
deposes this replica at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from dtq_core.errors import StaleLeaderError
from dtq_core.infra.loops import run_supervised
from dtq_scheduler_leader.leader import Leadership, retry_backoff

Step = Callable[[], Awaitable[float]]
"""One pass of a duty; returns how long to sleep before the next pass."""


async def run_while_leader(
    duty: str, leadership: Leadership, stop: asyncio.Event, step: Step
) -> None:
    """Run ``step`` over and over while this replica leads, until ``stop`` is set.

    ``duty`` names the duty in the ``duty_failed`` warning and the
    ``dtq_scheduler_redis_errors_total`` label.
    """

    async def lead_step() -> float:
        if not await leadership.wait_leading(stop):
            return 0.0  # stop is set: the loop ends
        try:
            return await step()
        except StaleLeaderError as exc:
            leadership.deposed(exc)
            return 0.0

    await run_supervised(
        lead_step,
        stop=stop,
        event="duty_failed",
        backoff=retry_backoff(),
        on_error=lambda _exc, _delay: leadership.metrics.redis_errors.labels(duty).inc(),
        duty=duty,
    )
