"""The heartbeat against real Redis: leases of everything held, the registry record."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING

from prometheus_client import generate_latest

from dtq_core import Client, TaskContext, TaskRegistry
from dtq_core.ops.admin import Admin
from dtq_core.protocol.routing import encode_routes, read_routes
from dtq_core.protocol.workers import WorkerRecord
from dtq_devtools.testing import wait_until
from dtq_worker import __version__

if TYPE_CHECKING:
    from conftest import Runner


async def test_prefetched_tasks_keep_their_lease(client: Client, run_worker: Runner) -> None:
    """A task waiting in the prefetch buffer longer than the visibility timeout is not
    reclaimed: the heartbeat extends everything the worker holds."""
    registry = TaskRegistry()

    @registry.task(name="hold")
    async def hold(ctx: TaskContext, seconds: float) -> int:
        await asyncio.sleep(seconds)
        return ctx.attempt

    await run_worker(registry, worker_concurrency=1, claim_batch=2, worker_prefetch=1)
    first = await client.enqueue("hold", args=[3.0])  # longer than the 2 s visibility timeout
    second = await client.enqueue("hold", args=[0.0])
    assert (await first.result(timeout=20)).result == 1
    outcome = await second.result(timeout=20)
    assert outcome.result == 1  # attempt 1: never reclaimed while it waited
    assert (await second.info()).errors == []


async def test_worker_registry_and_metrics(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()

    @registry.task(name="ok")
    async def ok(ctx: TaskContext) -> int:
        return 1

    worker = await run_worker(registry)
    await (await client.enqueue("ok")).result(timeout=10)
    workers = await Admin(client).workers()
    assert [w.id for w in workers] == [worker.consumer]
    routes = await read_routes(client.redis, client.keys)
    assert routes.handled["ok"] == {"default"}
    assert routes.declared["ok"] == "default"
    text = generate_latest(worker.metrics.registry).decode()
    assert 'dtq_tasks_total{queue="default",status="succeeded",task="ok"} 1.0' in text
    assert 'dtq_task_duration_seconds_count{queue="default",task="ok"} 1.0' in text
    assert "dtq_worker_inflight 0.0" in text


async def test_the_registry_hash_reads_back_as_the_worker_record(
    client: Client, run_worker: Runner
) -> None:
    registry = TaskRegistry()

    @registry.task(name="hb.noop", queue="hb-b")
    async def noop(ctx: TaskContext) -> None:
        return None

    worker = await run_worker(registry, ["hb-a", "hb-b"], worker_id="hb-1")
    key = client.keys.worker(worker.consumer)

    async def written() -> WorkerRecord | None:
        fields = await client.redis.hgetall(key)
        record = WorkerRecord.from_fields(fields)
        return record if record.state == "running" else None

    record = await wait_until(written, message="a beat while running")
    assert (record.id, record.worker_id) == (worker.consumer, "hb-1")
    assert (record.host, record.pid) == (socket.gethostname(), os.getpid())
    assert record.queues == ("hb-a", "hb-b")
    assert record.concurrency == worker.concurrency
    assert (record.inflight, record.prefetched, record.processed, record.failed) == (0, 0, 0, 0)
    assert record.version == __version__
    assert record.routes == encode_routes(registry)
    assert 0 < record.started_at <= int(worker.started_at * 1_000_000) + 1
    ttl_ms = await client.redis.pttl(key)
    assert 0 < ttl_ms <= int(client.settings.worker.heartbeat_interval_s * 3000) + 1000


async def test_a_served_queue_lost_from_the_registry_comes_back_with_the_next_beat(
    client: Client, run_worker: Runner
) -> None:
    """The registry is one key on one master: a failover may lose a write to it. The worker
    puts the queues it claims from back, or the scheduler would stop promoting them."""
    registry = TaskRegistry()
    registry.queue("kept", partitions=2)
    worker = await run_worker(registry, ["kept"], heartbeat_interval_s=0.2)
    await client.redis.srem(client.keys.queues, "kept", "kept~1")
    await worker.heartbeat.beat()
    assert {"kept", "kept~1"} <= await client.redis.smembers(client.keys.queues)
