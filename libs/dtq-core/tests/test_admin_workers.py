"""The worker registry as the admin API lists it (``dtq_core.ops.admin.workers``), against a real
redis-server."""

from __future__ import annotations

from typing import Any

from dtq_core.client import Client
from dtq_core.ops.admin import Admin
from dtq_devtools.testing.lifecycle import redis_ms


async def test_workers_come_from_the_registry_with_stale_ones_marked(client: Client) -> None:
    admin = Admin(client)
    assert await admin.workers() == []
    now = await redis_ms(client)
    fields: dict[str, Any] = {
        "host": "box",
        "pid": "42",
        "queues": "emails,default",
        "concurrency": "50",
        "inflight": "3",
        "processed": "100",
        "failed": "2",
        "started_at": str((now - 60_000) * 1000),
        "state": "draining",
        "version": "0.1.0",
    }
    await client.redis.zadd(client.keys.workers, {"w-fresh": now, "w-old": now - 10_000})
    await client.redis.hset(client.keys.worker("w-fresh"), mapping={"id": "w-fresh", **fields})
    await client.redis.hset(client.keys.worker("w-old"), mapping={"id": "w-old", **fields})
    await client.redis.zadd(client.keys.workers, {"w-gone": now})

    fresh, gone, old = await admin.workers()
    assert (fresh.id, fresh.host, fresh.pid, fresh.queues) == (
        "w-fresh",
        "box",
        42,
        ["emails", "default"],
    )
    assert (fresh.concurrency, fresh.in_flight, fresh.processed, fresh.failed) == (50, 3, 100, 2)
    assert fresh.state == "draining"
    assert fresh.version == "0.1.0"
    assert fresh.started_at is not None
    assert int(fresh.started_at.timestamp() * 1000) == now - 60_000
    assert int(fresh.last_heartbeat.timestamp() * 1000) == now
    assert 0 <= fresh.heartbeat_age_s < 3 * client.settings.worker.heartbeat_interval_s
    assert old.state == "stale"
    assert old.heartbeat_age_s >= 10
    assert (gone.id, gone.host, gone.pid, gone.state, gone.queues) == (
        "w-gone",
        None,
        None,
        "running",
        [],
    )
