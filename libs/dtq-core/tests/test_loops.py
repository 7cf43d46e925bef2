"""The supervised loop and the stop-aware sleep (pure asyncio, no Redis needed)."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from structlog.testing import capture_logs

from dtq_core.errors import RedisUnavailableError
from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import RETRYABLE
from dtq_core.infra.loops import retry_until_done, run_supervised, sleep_or_stop

NO_WAIT = Backoff(base=0.001, cap=0.001, jitter=0)


async def test_a_stop_during_the_sleep_returns_at_once() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stop.set)
    t0 = time.monotonic()
    assert await sleep_or_stop(stop, 30) is True
    assert time.monotonic() - t0 < 5


async def test_the_sleep_without_a_stop_lasts_its_time() -> None:
    t0 = time.monotonic()
    assert await sleep_or_stop(asyncio.Event(), 0.05) is False
    assert time.monotonic() - t0 >= 0.04


async def test_a_set_stop_does_not_sleep_at_all() -> None:
    stop = asyncio.Event()
    stop.set()
    assert await sleep_or_stop(stop, 30) is True


async def test_a_retryable_error_backs_off_and_the_loop_goes_on() -> None:
    stop = asyncio.Event()
    passes: list[int] = []
    seen: list[tuple[str, float]] = []

    async def step() -> float:
        passes.append(len(passes))
        if len(passes) <= 2:
            raise RedisConnectionError("refused")
        stop.set()
        return 0.0

    with capture_logs() as logs:
        await run_supervised(
            step,
            stop=stop,
            event="duty_failed",
            backoff=Backoff(base=0.01, cap=0.02, jitter=0),
            on_error=lambda exc, delay: seen.append((str(exc), delay)),
            duty="test",
        )
    assert len(passes) == 3
    assert seen == [("refused", 0.01), ("refused", 0.02)]
    warnings = [e for e in logs if e["event"] == "duty_failed"]
    assert [w["retry_in_s"] for w in warnings] == [0.01, 0.02]
    assert all(w["duty"] == "test" and w["error"] == "refused" for w in warnings)


async def test_a_pass_that_succeeds_resets_the_backoff() -> None:
    stop = asyncio.Event()
    backoff = Backoff(base=0.01, cap=1.0, jitter=0)
    outcomes = iter([RedisUnavailableError("away"), None, RedisUnavailableError("away")])
    delays: list[float] = []

    async def step() -> float:
        outcome = next(outcomes, StopIteration)
        if outcome is StopIteration:
            stop.set()
        elif isinstance(outcome, Exception):
            raise outcome
        return 0.0

    await run_supervised(step, stop=stop, backoff=backoff, on_error=lambda _, d: delays.append(d))
    assert delays == [0.01, 0.01]


async def test_a_non_retryable_error_propagates() -> None:
    async def step() -> float:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        await run_supervised(step, stop=asyncio.Event(), backoff=NO_WAIT)


async def test_the_loop_sleeps_what_the_step_returns_and_a_stop_ends_it() -> None:
    stop = asyncio.Event()
    passes = 0

    async def step() -> float:
        nonlocal passes
        passes += 1
        asyncio.get_running_loop().call_later(0.05, stop.set)
        return 30.0

    t0 = time.monotonic()
    await run_supervised(step, stop=stop)
    assert passes == 1
    assert time.monotonic() - t0 < 5


async def test_a_loop_without_a_stop_runs_until_cancelled() -> None:
    passes = 0

    async def step() -> float:
        nonlocal passes
        passes += 1
        return 0.001

    task = asyncio.create_task(run_supervised(step))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert passes > 1


async def test_retry_until_done_returns_what_the_call_returned() -> None:
    calls = 0

    async def call() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise OSError("reset")
        return "done"

    assert await retry_until_done(call, backoff=NO_WAIT) == "done"
    assert calls == 3


async def test_retry_until_done_gives_up_when_stopped() -> None:
    stop = asyncio.Event()

    async def call() -> str:
        stop.set()
        raise RedisConnectionError("refused")

    assert await retry_until_done(call, stop=stop, backoff=NO_WAIT) is None


async def test_retry_until_done_lets_other_errors_through() -> None:
    async def call() -> str:
        raise ValueError("refused for good")

    with pytest.raises(ValueError, match="for good"):
        await retry_until_done(call, backoff=NO_WAIT)


def test_the_retryable_set_covers_redis_dtq_and_socket_errors() -> None:
    assert issubclass(RedisConnectionError, RETRYABLE)
    assert issubclass(RedisUnavailableError, RETRYABLE)
    # A caller's own asyncio.timeout around a Redis call (TimeoutError is an OSError).
    assert issubclass(TimeoutError, RETRYABLE)
    assert not issubclass(ValueError, RETRYABLE)
