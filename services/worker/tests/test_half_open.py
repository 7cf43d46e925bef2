"""A worker whose connections to Redis went half-open (silent for good, no FIN, no RST)."""

from __future__ import annotations

import asyncio
from typing import Any

from dtq_core import Client, TaskContext, TaskRegistry, TaskStatus
from dtq_core.connection import SOCKET_TIMEOUT_S
from dtq_core.testing import RedisServer, wait_until
from dtq_core.testing.proxy import FaultProxy
from services.worker.tests.conftest import Runner


async def _listeners(client: Client, name: str) -> set[str]:
    """The ids of the subscribed connections named ``name``, as Redis sees them."""
    clients: list[dict[str, Any]] = await client.redis.client_list(_type="pubsub")
    return {str(c["id"]) for c in clients if c.get("name") == name}


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
