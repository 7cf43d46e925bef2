"""The claimer against real Redis: strict priority, paused queues, wake-up reads."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from dtq_core import Client, TaskContext, TaskRegistry, TaskStatus
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import wait_until
from dtq_worker.claimer import read_slots
from dtq_worker.wake_reads import QUEUES_PER_READ
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


def _reads_needed(worker: Worker, queues: list[str]) -> int:
    """The fewest wake-up reads that watch ``queues``: QUEUES_PER_READ to a read, only queues
    of one slot together on a cluster."""
    slot_of = read_slots(worker.ctx) or (lambda _: 0)
    per_slot = Counter(slot_of(q) for q in queues)
    return sum(-(-n // QUEUES_PER_READ) for n in per_slot.values())


async def test_an_idle_worker_watches_many_queues_with_few_reads_and_starts_what_they_deliver(
    client: Client, run_worker: Runner
) -> None:
    registry = TaskRegistry()

    @registry.task(name="echo")
    async def echo(ctx: TaskContext, x: int) -> int:
        return x

    queues = [f"idle-{i}" for i in range(40)]
    worker = await run_worker(registry, queues)
    fewest = _reads_needed(worker, queues)
    await wait_until(
        lambda: all(worker.claimer.is_parked(q) for q in queues), message="every queue watched"
    )
    assert worker.claimer.parked_reads == fewest  # not one read, one connection, per queue
    handle = await client.enqueue("echo", args=[3], queue="idle-17")
    assert (await handle.result(timeout=10)).result == 3
    await wait_until(lambda: worker.claimer.is_parked("idle-17"), message="watched again")
    assert all(worker.claimer.is_parked(q) for q in queues)  # the others stayed watched
    # The queue that had work got a read of its own; once it found nothing, the reads merge.
    await wait_until(
        lambda: worker.claimer.parked_reads == fewest, timeout=10, message="reads merged"
    )
    handles = [await client.enqueue("echo", args=[i], queue=q) for i, q in enumerate(queues)]
    assert [(await h.result(timeout=10)).result for h in handles] == list(range(len(queues)))


async def test_a_queue_whose_streams_vanished_does_not_blind_the_others_read(
    client: Client, run_worker: Runner
) -> None:
    """A read over several queues fails whole (NOGROUP) when one queue's streams are gone:
    that queue is claimed from (which makes its groups again), the others are read on."""
    registry = TaskRegistry()

    @registry.task(name="echo")
    async def echo(ctx: TaskContext, x: int) -> int:
        return x

    queues = ["idle-a", "idle-b", "idle-c"]
    worker = await run_worker(registry, queues)
    await wait_until(
        lambda: all(worker.claimer.is_parked(q) for q in queues), message="every queue watched"
    )
    gone = client.queue_keys("idle-b")
    for stream in gone.streams:
        await client.redis.delete(stream)
    handle = await client.enqueue("echo", args=[1], queue="idle-c")
    assert (await handle.result(timeout=10)).result == 1
    handle = await client.enqueue("echo", args=[2], queue="idle-b")
    assert (await handle.result(timeout=10)).result == 2
    await wait_until(
        lambda: all(worker.claimer.is_parked(q) for q in queues), message="every queue watched"
    )
