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
    assert [p.id for p in fresh.processes] == ["w-fresh"]
    assert (fresh.process_slots, fresh.processes[0].slot) == (1, None)


async def test_the_processes_of_one_worker_are_one_worker_with_a_line_each(
    client: Client,
) -> None:
    """``dtq-worker --processes 2``: each process registers as ``<group>/<slot>`` (``.n`` once
    restarted); the listing shows one worker, sums over its live processes, and each process;
    a killed process whose record expired stays under its worker, stale."""
    admin = Admin(client)
    now = await redis_ms(client)
    group = "box-1:0a1b2c"

    def record(slot: int, restarts: int, pid: int, inflight: int) -> dict[str, Any]:
        return {
            "host": "box",
            "pid": str(pid),
            "queues": "default",
            "concurrency": "10",
            "inflight": str(inflight),
            "processed": str(100 * (slot + 1)),
            "failed": "1",
            "started_at": str((now - 60_000 + slot) * 1000),
            "state": "running",
            "version": "0.1.0",
            "slot": str(slot),
            "slots": "2",
            "restarts": str(restarts),
            "supervisor": "7",
            "pool": "2",
        }

    live = {f"{group}/0.1": record(0, 1, 11, 3), f"{group}/1": record(1, 0, 12, 4)}
    for worker_id, fields in live.items():
        await client.redis.zadd(client.keys.workers, {worker_id: now})
        await client.redis.hset(client.keys.worker(worker_id), mapping=fields)
    # The process slot 0 had before its restart: killed, its record expired, not yet swept.
    await client.redis.zadd(client.keys.workers, {f"{group}/0": now - 10_000})
    await client.redis.zadd(client.keys.workers, {"other:000000": now})

    worker, other = await admin.workers()
    assert other.id == "other:000000"
    assert worker.id == group
    assert (worker.host, worker.pid, worker.queues, worker.state) == (
        "box",
        7,
        ["default"],
        "running",
    )
    assert (worker.concurrency, worker.in_flight) == (20, 7)  # the live processes
    assert (worker.processed, worker.failed) == (300, 2)
    assert worker.process_slots == 2
    assert [(p.id, p.slot, p.state, p.pid, p.restarts) for p in worker.processes] == [
        (f"{group}/0", 0, "stale", None, 0),
        (f"{group}/0.1", 0, "running", 11, 1),
        (f"{group}/1", 1, "running", 12, 0),
    ]
    assert worker.processes[1].handler_processes == 2
    assert 0 <= worker.heartbeat_age_s < 3 * client.settings.worker.heartbeat_interval_s
