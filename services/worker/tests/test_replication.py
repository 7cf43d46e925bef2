"""A worker whose every transition waits for a replica (``DTQ_REDIS_WAIT_REPLICAS=1``), on a
real master and replica: tasks run and finish; while the replica stalls (SIGSTOP) the worker
waits out its failed claims and finishes, and afterwards each task ends once."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dtq_core import Client, TaskContext, TaskRegistry, TaskStatus
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import load_settings
from dtq_devtools.testing import metric_value, wait_until
from dtq_devtools.testing.history import queue_events
from dtq_devtools.testing.plugin import FAST
from dtq_devtools.testing.topologies import ReplicaSet

if TYPE_CHECKING:
    from conftest import Runner


async def test_a_waiting_worker_rides_out_a_stalled_replica(
    run_worker: Runner, replica_set: ReplicaSet
) -> None:
    overrides = {
        "redis_url": replica_set.url,
        "redis_wait_replicas": 1,
        "redis_wait_timeout_ms": 600,
    }
    settings = load_settings({}, **FAST, **overrides)
    registry = TaskRegistry()
    release = asyncio.Event()
    ran: list[str] = []

    @registry.task(name="rep.step")
    async def step(ctx: TaskContext, n: int) -> int:
        ran.append(ctx.task_id)
        await release.wait()
        return n

    async with Client(connect(settings), settings, owns_redis=True) as client:
        await client.redis.flushall()
        replica_set.wait_synced()
        worker = await run_worker(registry, ["rep"], **overrides)
        first = await client.enqueue("rep.step", args=[1], queue="rep")
        await wait_until(lambda: len(ran) == 1, message="the first task started")
        with replica_set.replicas[0].frozen():
            release.set()  # its finish now cannot be confirmed
            registry = worker.ctx.metrics.registry
            await wait_until(
                lambda: metric_value(registry, "dtq_worker_redis_errors_total", loop="finish"),
                message="a finish not confirmed",
            )
        replica_set.wait_synced()
        second = await client.enqueue("rep.step", args=[2], queue="rep")
        for handle, n in ((first, 1), (second, 2)):
            outcome = await handle.result(timeout=20)
            assert (outcome.status, outcome.result) == (TaskStatus.SUCCEEDED, n)
        events = await queue_events(client.redis, client.queue_keys("rep"))
        succeeded = [e.task_id for e in events if e.type == "task.succeeded"]
        assert sorted(succeeded) == sorted([first.id, second.id])  # each ended once
