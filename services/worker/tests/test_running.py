"""The running set against real Redis: cancellation, timeouts, progress of running attempts."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

import pytest

from dtq_core import Client, Retry, TaskContext, TaskRegistry, TaskStatus
from dtq_devtools.testing.history import queue_events

if TYPE_CHECKING:
    from conftest import Runner


@pytest.mark.usefixtures("promoter")
async def test_retry_request_and_timeout(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()

    @registry.task(name="later")
    async def later(ctx: TaskContext) -> int:
        if ctx.attempt == 1:
            raise Retry(delay_s=0.01, reason="not yet")
        return ctx.attempt

    @registry.task(name="slow", max_attempts=1, timeout_s=0.1)
    async def slow(ctx: TaskContext) -> None:
        await asyncio.sleep(5)

    await run_worker(registry)
    h = await client.enqueue("later")
    s = await client.enqueue("slow")
    outcome = await s.result(timeout=10)
    assert outcome.status is TaskStatus.DEAD
    assert outcome.error is not None
    assert outcome.error.reason == "timeout"
    later_outcome = await h.result(timeout=10)
    assert later_outcome.result == 2
    record = await h.info()
    assert [e.reason for e in record.errors] == ["retry_requested"]


async def test_cancel_a_running_async_handler(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @registry.task(name="long")
    async def long(ctx: TaskContext) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await run_worker(registry)
    handle = await client.enqueue("long")
    await asyncio.wait_for(started.wait(), 10)
    assert await handle.cancel() is TaskStatus.RUNNING  # requested, the worker does the rest
    outcome = await handle.result(timeout=10)
    assert outcome.status is TaskStatus.CANCELLED
    assert cancelled.is_set()
    types = [e.type for e in await queue_events(client.redis, client.queue_keys("default"))]
    assert types[-1] == "task.cancelled"


async def test_progress_is_recorded_and_published(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()
    halfway = asyncio.Event()
    go_on = asyncio.Event()

    @registry.task(name="steps")
    async def steps(ctx: TaskContext) -> str:
        assert await ctx.progress(0.5, "half")
        halfway.set()
        await go_on.wait()
        return "done"

    await run_worker(registry)
    handle = await client.enqueue("steps")
    await asyncio.wait_for(halfway.wait(), 10)
    record = await handle.info()
    assert record.progress is not None
    assert (record.progress.value, record.progress.message) == (0.5, "half")
    go_on.set()
    assert (await handle.result(timeout=10)).result == "done"
    events = await queue_events(client.redis, client.queue_keys("default"))
    progress = [e for e in events if e.type == "task.progress"]
    assert progress[0].data == {"progress": {"value": 0.5, "message": "half"}}
    (done,) = [e for e in events if e.type == "task.succeeded"]
    assert done.attempt == 1  # outcome events name the attempt, like started ones


async def test_sync_handler_timeout_fails_the_attempt(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()
    release = threading.Event()

    @registry.task(name="blocking", max_attempts=1, timeout_s=0.2)
    def blocking(ctx: TaskContext) -> None:
        release.wait(10)

    await run_worker(registry)
    try:
        outcome = await (await client.enqueue("blocking")).result(timeout=10)
    finally:
        release.set()
    assert outcome.status is TaskStatus.DEAD
    assert outcome.error is not None
    assert outcome.error.reason == "timeout"
