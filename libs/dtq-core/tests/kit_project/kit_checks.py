"""The test kit, used as a user's suite uses it (run by libs/dtq-core/tests/test_testing_kit.py
in a pytest process of its own, with ``pytest_plugins = ["dtq_core.testing"]``)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import kitapp
import pytest

from dtq_core import Client, chain, step
from dtq_core.messages import TaskStatus
from dtq_core.testing import TestClock, TestWorker


@pytest.fixture(autouse=True)
def _fresh_records() -> None:
    kitapp.ran.clear()
    kitapp.attempts.clear()


async def test_a_task_runs_in_this_process(dtq_client: Client, dtq_worker: TestWorker) -> None:
    handle = await kitapp.add.enqueue(dtq_client, 2, 3)
    await dtq_worker.run_until_idle()
    outcome = await handle.result(timeout=0)
    assert (outcome.status, outcome.result) == (TaskStatus.SUCCEEDED, 5)
    assert kitapp.ran == ["add 2 3"]


async def test_a_delay_comes_due_when_the_clock_moves(
    dtq_client: Client, dtq_worker: TestWorker, dtq_clock: TestClock
) -> None:
    started = time.monotonic()
    handle = await kitapp.add.with_options(delay_s=3 * 3600).enqueue(dtq_client, 1, 1)
    await dtq_worker.run_until_idle()
    assert await handle.status() == TaskStatus.SCHEDULED
    await dtq_clock.advance(timedelta(hours=3) - timedelta(seconds=1))
    await dtq_worker.run_until_idle()
    assert await handle.status() == TaskStatus.SCHEDULED
    await dtq_clock.advance(1)
    await dtq_worker.run_until_idle()
    assert (await handle.result(timeout=0)).result == 2
    assert time.monotonic() - started < 60  # three hours, without waiting for them


async def test_retries_wait_for_their_backoff_on_the_clock(
    dtq_client: Client, dtq_worker: TestWorker, dtq_clock: TestClock
) -> None:
    handle = await kitapp.flaky.enqueue(dtq_client, "a", 2)
    await dtq_worker.run_until_idle()
    assert await handle.status() == TaskStatus.RETRYING
    assert kitapp.attempts == {"a": 1}
    await dtq_worker.run_until_idle(jump=True)
    outcome = await handle.result(timeout=0)
    assert (outcome.status, outcome.attempts, outcome.result) == (
        TaskStatus.SUCCEEDED,
        3,
        "ok after 3",
    )


async def test_a_task_that_always_fails_ends_dead(
    dtq_client: Client, dtq_worker: TestWorker
) -> None:
    handle = await kitapp.flaky.enqueue(dtq_client, "b", 99)
    await dtq_worker.run_until_idle(jump=True)
    outcome = await handle.result(timeout=0)
    assert (outcome.status, outcome.attempts) == (TaskStatus.DEAD, 4)
    assert outcome.error is not None
    assert "attempt 4 fails" in outcome.error.message


async def test_a_schedule_fires_on_the_clock(dtq_worker: TestWorker, dtq_clock: TestClock) -> None:
    await dtq_clock.set(datetime(2026, 3, 1, 9, 30, tzinfo=UTC))
    await dtq_worker.run_until_idle()
    assert kitapp.ran == []
    await dtq_clock.advance(timedelta(minutes=30))
    await dtq_worker.run_until_idle()
    assert kitapp.ran == ["tick"]
    # 15:30: five ticks missed; with misfire="skip" none of them fires.
    await dtq_clock.advance(timedelta(hours=5, minutes=30))
    await dtq_worker.run_until_idle()
    assert kitapp.ran == ["tick"]
    await dtq_clock.advance(timedelta(minutes=30))
    await dtq_worker.run_until_idle()
    assert kitapp.ran == ["tick", "tick"]


async def test_a_workflow_advances_between_its_steps(
    dtq_client: Client, dtq_worker: TestWorker
) -> None:
    wf = await dtq_client.enqueue_workflow(
        chain(step("kit.add", args=[1, 2]), step("kit.add", args=[10]), step("kit.add", args=[100]))
    )
    await dtq_worker.run_until_idle()
    assert await wf.result(timeout=0) == 113
    assert kitapp.ran == ["add 1 2", "add 3 10", "add 13 100"]


async def test_a_crashed_workers_lease_expires_on_the_clock(
    dtq_client: Client, dtq_worker: TestWorker, dtq_clock: TestClock
) -> None:
    handle = await kitapp.stuck_once.enqueue(dtq_client)
    deadline = time.monotonic() + 10
    while await handle.status() != TaskStatus.RUNNING:
        assert time.monotonic() < deadline, "the task never started"
        await asyncio.sleep(0.01)
    await dtq_worker.crash()
    await dtq_worker.run_until_idle()  # its lease holds: nothing is taken back yet
    assert await handle.status() == TaskStatus.RUNNING
    await dtq_clock.advance(dtq_worker.settings.worker.visibility_timeout_s)
    await dtq_worker.run_until_idle()
    outcome = await handle.result(timeout=0)
    assert (outcome.status, outcome.attempts, outcome.result) == (
        TaskStatus.SUCCEEDED,
        2,
        "done on attempt 2",
    )
    assert kitapp.ran == ["stuck_once attempt 1", "stuck_once attempt 2"]


async def test_run_until_idle_says_what_is_still_busy(
    dtq_client: Client, dtq_worker: TestWorker
) -> None:
    await kitapp.slow.enqueue(dtq_client, 30)
    with pytest.raises(TimeoutError, match="running"):
        await dtq_worker.run_until_idle(timeout=0.5)


async def test_each_test_starts_on_a_clean_database_and_clock(
    dtq_client: Client, dtq_clock: TestClock
) -> None:
    assert await dtq_clock.offset_s() == 0
    assert await dtq_client.redis.dbsize() == 0
    await dtq_clock.advance(3600)
    await dtq_client.redis.set("left-behind", 1)


async def test_and_the_next_one_too(dtq_client: Client, dtq_clock: TestClock) -> None:
    assert await dtq_clock.offset_s() == 0
    assert await dtq_client.redis.exists("left-behind") == 0


async def test_the_clock_is_what_python_reads_of_redis_time(dtq_clock: TestClock) -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    now = await dtq_clock.set(when)
    assert abs((now - when).total_seconds()) < 5
    later = await dtq_clock.advance(timedelta(days=1))
    assert abs((later - when - timedelta(days=1)).total_seconds()) < 5
    with pytest.raises(ValueError, match="forward"):
        await dtq_clock.advance(-1)
