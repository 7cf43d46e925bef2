"""A worker whose connections to Redis went half-open (silent for good, no FIN, no RST)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from dtq_core import Client, TaskContext, TaskRegistry, TaskStatus
from dtq_core.infra.connection import SOCKET_TIMEOUT_S
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.history import queue_events
from dtq_devtools.testing.proxy import FaultProxy

if TYPE_CHECKING:
    from conftest import Runner

# The fault proxy forwards to one redis-server; on a cluster or through Sentinel the client
# learns the data nodes' own addresses (CLUSTER SLOTS, the sentinels' answer) and goes around it.
pytestmark = pytest.mark.standalone_only


async def _listeners(client: Client, name: str) -> set[str]:
    """The ids of the subscribed connections named ``name``, as Redis sees them."""
    clients: list[dict[str, Any]] = await client.redis.client_list(_type="pubsub")
    return {str(c["id"]) for c in clients if c.get("name") == name}


@pytest.mark.standalone_only  # a TCP proxy to one port
async def test_the_cancellation_listener_replaces_a_half_open_connection(
    client: Client, run_worker: Runner, redis_server: RedisServer
) -> None:
    """The listener only reads: without its PINGs a half-open connection would never fail
    and cancellations would wait for the next heartbeat for the life of the process. Here
    the heartbeat comes every 10 s, so a cancellation that lands before the next beat came
    through the listener."""
    registry = TaskRegistry()
    started = asyncio.Event()

    @registry.task(name="long")
    async def long(ctx: TaskContext) -> None:
        started.set()
        await asyncio.sleep(60)

    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    try:
        worker = await run_worker(
            registry,
            redis_url=proxy.url,
            visibility_timeout_s=60.0,
            heartbeat_interval_s=10.0,
        )
        name = f"dtq-worker-wake:{worker.consumer}"
        handle = await client.enqueue("long")
        await asyncio.wait_for(started.wait(), 10)
        before = await wait_until(lambda: _listeners(client, name), message="listening")
        severed = proxy.sever()
        assert severed > 0

        async def replaced() -> bool:
            return bool(await _listeners(client, name) - before)

        await wait_until(replaced, timeout=3 * SOCKET_TIMEOUT_S, message="a new listener")
        # The worker's other calls stalled on the silent link too: cancel right after a
        # heartbeat made on a new connection.
        beat = await _beat_after(client, worker.consumer, 0)
        beat = await _beat_after(client, worker.consumer, beat)
        assert await handle.cancel() is TaskStatus.RUNNING
        outcome = await handle.result(timeout=30)
        score = await client.redis.zscore(client.keys.workers, worker.consumer)
        assert outcome.status is TaskStatus.CANCELLED
        assert score == beat  # cancelled before the next heartbeat could have said so
    finally:
        await proxy.stop()


async def _beat_after(client: Client, consumer: str, after: float) -> float:
    """The worker's heartbeat score once it is later than ``after``."""

    async def later() -> float | None:
        score = await client.redis.zscore(client.keys.workers, consumer)
        return score if score is not None and score > after else None

    return float(await wait_until(later, timeout=3 * SOCKET_TIMEOUT_S, message="a heartbeat"))


@pytest.mark.standalone_only  # a TCP proxy to one port
async def test_a_task_delivered_on_a_half_open_connection_starts_without_waiting_for_reclaim(
    client: Client, run_worker: Runner, redis_server: RedisServer
) -> None:
    """The idle worker's blocking wake-up read is in Redis when the link goes silent: the
    next task is delivered to the worker on that connection, and the reply never arrives.
    When the read times out the worker reads its own pending entries back and starts the
    task, instead of leaving it for a reclaimer a visibility timeout (here 300 s) later."""
    registry = TaskRegistry()
    attempts: list[int] = []

    @registry.task(name="quick")
    async def quick(ctx: TaskContext) -> int:
        attempts.append(ctx.attempt)
        return ctx.attempt

    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    try:
        worker = await run_worker(
            registry, redis_url=proxy.url, visibility_timeout_s=300.0, heartbeat_interval_s=5.0
        )
        await wait_until(
            lambda: worker.claimer.is_parked("default"), message="a wake-up read parked"
        )
        assert proxy.sever() > 0
        handle = await client.enqueue("quick")

        async def delivered_to_the_silent_read() -> bool:
            pending = await client.redis.xpending(
                client.queue_keys("default").streams[5], "workers"
            )
            return int(pending["pending"]) == 1

        # Delivered to the read parked when the link went silent, or, when that one's block
        # ran out first, to the next, sent once the silent one's socket timed out.
        await wait_until(
            delivered_to_the_silent_read,
            timeout=3 * SOCKET_TIMEOUT_S,
            message="delivered on the silent link",
        )
        outcome = await handle.result(timeout=6 * SOCKET_TIMEOUT_S)
        assert outcome.status is TaskStatus.SUCCEEDED
        assert attempts == [1]  # started from its delivery, not after a reclaim
        events = await queue_events(client.redis, client.queue_keys("default"))
        assert not [e for e in events if e.type == "task.requeued"]
    finally:
        await proxy.stop()
