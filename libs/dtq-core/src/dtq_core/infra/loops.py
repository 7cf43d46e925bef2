"""The shape of every long-lived loop in dtq: act, sleep until the next pass or a stop, and
wait out a Redis that fails with a capped backoff instead of crashing.

- :func:`sleep_or_stop`: the one stop-aware sleep.
- :func:`run_supervised`: run a step over and over until stopped; a retryable error
  (:data:`~dtq_core.infra.connection.RETRYABLE`) is counted, logged and backed off, any other
  error propagates (a bug should end the process, not loop forever).
- :func:`retry_until_done`: the same for one call that must succeed once (a registration at
  start-up).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import RETRYABLE

log = structlog.get_logger()

T = TypeVar("T")

Step = Callable[[], Awaitable[float]]
"""One pass of a loop; returns how long to sleep before the next pass (0: at once)."""
OnError = Callable[[Exception, float], None]
"""Told of each retryable error and the delay before the next try (counts it in a metric)."""


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
    """Sleep ``seconds`` or until ``stop`` is set, whichever comes first.

    Returns:
        Whether ``stop`` is set.
    """
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


class _Retrier:
    """What to do with a retryable error: count it, log it, and say how long to wait."""

    def __init__(
        self,
        event: str | None,
        backoff: Backoff | None,
        on_error: OnError | None,
        traceback: bool,
        log_fields: dict[str, Any],
    ) -> None:
        self.event = event
        self.backoff = backoff or Backoff()
        self.on_error = on_error
        self.traceback = traceback
        self.log_fields = log_fields

    def failed(self, exc: Exception) -> float:
        delay = self.backoff.next()
        if self.on_error is not None:
            self.on_error(exc, delay)
        if self.event is not None:
            log.warning(
                self.event,
                error=str(exc) or type(exc).__name__,
                retry_in_s=round(delay, 3),
                exc_info=self.traceback,
                **self.log_fields,
            )
        return delay


async def run_supervised(
    step: Step,
    *,
    stop: asyncio.Event | None = None,
    event: str | None = None,
    backoff: Backoff | None = None,
    on_error: OnError | None = None,
    traceback: bool = True,
    **log_fields: Any,
) -> None:
    """Run ``step`` over and over until ``stop`` is set (or, without ``stop``, until
    cancelled), sleeping what each pass returns.

    Args:
        step: one pass; returns the seconds to sleep before the next.
        stop: ends the loop, also during a sleep (at once).
        event: the warning logged for each retryable error (with ``error``, ``retry_in_s``
            and ``log_fields``); ``None`` when ``on_error`` logs for itself.
        backoff: the delays after consecutive errors (reset by a pass that succeeds);
            default :class:`Backoff`'s.
        on_error: called with each retryable error and the delay before the next try.
        traceback: whether the warning carries the traceback.
        log_fields: more fields of the warning (``duty="promoter"``).

    Raises:
        Exception: anything outside :data:`~dtq_core.infra.connection.RETRYABLE`, as
            ``step`` raised it.
    """
    stop = stop or asyncio.Event()
    retrier = _Retrier(event, backoff, on_error, traceback, log_fields)
    while not stop.is_set():
        raise_if_cancelled()
        try:
            delay = await step()
            retrier.backoff.reset()
        except RETRYABLE as exc:
            delay = retrier.failed(exc)
        await sleep_or_stop(stop, delay)


async def retry_until_done(
    call: Callable[[], Awaitable[T]],
    *,
    stop: asyncio.Event | None = None,
    event: str | None = None,
    backoff: Backoff | None = None,
    on_error: OnError | None = None,
    traceback: bool = True,
    **log_fields: Any,
) -> T | None:
    """Await ``call`` until it returns, waiting out retryable errors as
    :func:`run_supervised` does (same arguments).

    Returns:
        What ``call`` returned, or ``None`` when ``stop`` was set first.
    """
    stop = stop or asyncio.Event()
    retrier = _Retrier(event, backoff, on_error, traceback, log_fields)
    while not stop.is_set():
        try:
            return await call()
        except RETRYABLE as exc:
            await sleep_or_stop(stop, retrier.failed(exc))
    return None
