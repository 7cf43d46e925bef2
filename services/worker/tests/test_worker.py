"""The worker process against real Redis, in-process: handlers run, retries end in the DLQ, it
waits for the function library, drains a full Redis and leaves no consumer behind."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from dtq_core import Client, TaskContext, TaskRegistry, TaskRequest, TaskStatus
from dtq_core.errors import RedisUnavailableError
from dtq_core.infra.settings import Settings
from dtq_core.protocol.scripts import load_library
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.servers import acl_deluser, acl_setuser, with_user
from dtq_worker.worker import Worker

if TYPE_CHECKING:
    from conftest import Runner


async def test_runs_async_and_sync_handlers(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()

    @registry.task(name="add")
    async def add(ctx: TaskContext, a: int, b: int) -> int:
        return a + b

    @registry.task(name="mul")
    def mul(a: int, b: int) -> int:
        return a * b

    await run_worker(registry)
    h1 = await client.enqueue("add", args=[2, 3])
    h2 = await client.enqueue("mul", args=[4, 5])
    o1 = await h1.result(timeout=10)
    o2 = await h2.result(timeout=10)
    assert (o1.status, o1.result) == (TaskStatus.SUCCEEDED, 5)
    assert (o2.status, o2.result) == (TaskStatus.SUCCEEDED, 20)


@pytest.mark.usefixtures("promoter")
async def test_retry_then_dlq_with_error_history(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()

    @registry.task(name="boom", max_attempts=3)
    async def boom(ctx: TaskContext) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    await run_worker(registry)
    handle = await client.enqueue("boom")
    outcome = await handle.result(timeout=15)
    assert outcome.status is TaskStatus.DEAD
    record = await handle.info()
    assert record.attempts == 3
    assert [e.message for e in record.errors] == ["attempt 1", "attempt 2", "attempt 3"]
    assert record.errors[0].traceback
    assert "ValueError" in record.errors[0].traceback
    dlq = await client.redis.xrange(client.queue_keys("default").dlq)
    assert len(dlq) == 1


@pytest.mark.standalone_only  # an ACL user on one server
async def test_waits_for_the_function_library_it_may_not_load(
    client: Client, run_worker: Runner, redis_url: str
) -> None:
    """A least-privilege worker facing an empty library retries with backoff (no crash) and
    starts work once ``dtq migrate`` (here: an allowed client) loads it."""
    registry = TaskRegistry()

    @registry.task(name="fn.echo")
    async def echo(ctx: TaskContext, x: int) -> int:
        return x

    acl = ["on", ">pw", "~*", "&*", "+@all", "-function|load", "-function|delete"]
    await acl_setuser(client.redis, "dtq-worker-noload", *acl)
    try:
        handle = await client.enqueue("fn.echo", args=[7], queue="fn-wait")
        await client.redis.function_flush()
        url = with_user(redis_url, "dtq-worker-noload", "pw")
        worker = await run_worker(registry, ["fn-wait"], redis_url=url)
        await wait_until(lambda: worker.scripts.reloads >= 2, message="the worker retried")
        assert worker.state == "running"
        assert await handle.status() == TaskStatus.QUEUED
        await load_library(client.redis)
        outcome = await handle.result(timeout=10)
        assert (outcome.status, outcome.result) == (TaskStatus.SUCCEEDED, 7)
    finally:
        await acl_deluser(client.redis, "dtq-worker-noload")


@pytest.mark.standalone_only  # reconfigures the server (maxmemory)
async def test_a_full_redis_refuses_submits_whole_and_workers_still_drain(
    client: Client, run_worker: Runner
) -> None:
    """Under ``maxmemory`` with noeviction (failure mode B8, docs/failure-modes.md), a submit
    is refused whole (nothing half-written), and a worker started then still claims and
    finishes the backlog, which is what frees memory; it registers its queues once Redis has
    room again."""
    registry = TaskRegistry()

    @registry.task(name="oom.echo")
    async def echo(ctx: TaskContext, blob: str) -> int:
        return len(blob)

    handles = [await client.enqueue("oom.echo", args=["x" * 2000], queue="oom") for _ in range(30)]
    keys_before = await client.redis.dbsize()
    await client.redis.config_set("maxmemory", "1")  # every plain write is refused now
    try:
        with pytest.raises(RedisUnavailableError, match="maxmemory"):
            await client.enqueue("oom.echo", args=["y"], queue="oom")
        with pytest.raises(RedisUnavailableError):
            await client.enqueue_many([TaskRequest(task="oom.echo", queue="oom", args=["z"])] * 3)
        assert await client.redis.dbsize() == keys_before
        await run_worker(registry, ["oom", "oom-idle"])
        for handle in handles:
            outcome = await handle.result(timeout=15)
            assert (outcome.status, outcome.result) == (TaskStatus.SUCCEEDED, 2000)
        assert not await client.redis.sismember(client.keys.queues, "oom-idle")
    finally:
        await client.redis.config_set("maxmemory", "0")
    await wait_until(
        lambda: client.redis.sismember(client.keys.queues, "oom-idle"),
        timeout=10,
        message="queues registered once Redis has room",
    )


async def test_a_clean_stop_leaves_no_consumer_behind(client: Client, settings: Settings) -> None:
    """Every worker process reads under a name of its own; when it stops cleanly it deletes
    that consumer from its queues' groups (it holds nothing once drained)."""
    registry = TaskRegistry()

    @registry.task(name="c.echo")
    async def echo(ctx: TaskContext, x: int) -> int:
        return x

    worker = Worker(settings, registry, ["consumers"])
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    handle = await client.enqueue("c.echo", args=[1], queue="consumers")
    assert (await handle.result(timeout=10)).result == 1
    stream = client.queue_keys("consumers").streams[5]
    names = [c["name"] for c in await client.redis.xinfo_consumers(stream, "workers")]
    assert worker.consumer in names
    stop.set()
    await asyncio.wait_for(running, 20)
    names = [c["name"] for c in await client.redis.xinfo_consumers(stream, "workers")]
    assert worker.consumer not in names
