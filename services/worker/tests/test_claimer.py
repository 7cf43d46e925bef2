"""The claimer against real Redis: strict priority, paused queues, wake-up reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtq_core import Client, TaskContext, TaskRegistry, TaskStatus
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import wait_until
from dtq_worker.worker import Worker

if TYPE_CHECKING:
    from conftest import Runner


async def test_strict_priority_within_a_queue(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()
    order: list[int] = []

    @registry.task(name="record")
    async def record(ctx: TaskContext, p: int) -> None:
        order.append(p)

    for p in [0, 3, 9, 5, 1, 7]:
        await client.enqueue("record", args=[p], priority=p)
    await run_worker(registry, worker_concurrency=1, claim_batch=1, worker_prefetch=0)
    await wait_until(lambda: len(order) == 6)
    assert order == [9, 7, 5, 3, 1, 0]


async def test_paused_queue_is_not_claimed_until_resumed(
    client: Client, run_worker: Runner
) -> None:
    registry = TaskRegistry()
    ran: list[int] = []

    @registry.task(name="mark")
    async def mark(ctx: TaskContext, n: int) -> None:
        ran.append(n)

    admin = Admin(client)
    await client.enqueue("mark", args=[0])
    await admin.pause("default")
    worker = await run_worker(registry)
    await wait_until(
        lambda: worker.claimer.plan.is_paused("default"), message="worker saw the pause"
    )
    h = await client.enqueue("mark", args=[1])
    await wait_until(lambda: _claims_at_least(worker, 1), message="a claim round trip")
    assert ran == []
    assert await h.status() is TaskStatus.QUEUED
    await admin.resume("default")
    await h.result(timeout=10)
    assert sorted(ran) == [0, 1]


def _claims_at_least(worker: Worker, n: int) -> bool:
    samples = worker.metrics.registry.get_sample_value
    return (samples("dtq_worker_claims_total", {"queue": "default"}) or 0) >= n


async def test_an_idle_worker_parks_a_wake_up_read_per_queue_and_starts_what_it_delivers(
    client: Client, run_worker: Runner
) -> None:
    registry = TaskRegistry()

    @registry.task(name="echo")
    async def echo(ctx: TaskContext, x: int) -> int:
        return x

    queues = ["idle-a", "idle-b"]
    worker = await run_worker(registry, queues)
    await wait_until(
        lambda: all(worker.claimer.is_parked(q) for q in queues), message="two parked reads"
    )
    handle = await client.enqueue("echo", args=[3], queue="idle-b")
    assert (await handle.result(timeout=10)).result == 3
    await wait_until(lambda: worker.claimer.is_parked("idle-b"), message="parked again")
    assert worker.claimer.is_parked("idle-a")  # the other read stayed where it was
