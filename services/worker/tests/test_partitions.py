"""A worker serving a partitioned queue: it applies the partition count declared in code,
drains every partition, and follows a growth without a restart."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from dtq_core import Client, TaskContext, TaskRegistry
from dtq_core.names import split_partition, split_task_id
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import wait_until

if TYPE_CHECKING:
    from conftest import Runner


def partition_of(task_id: str) -> int:
    stored, _ = split_task_id(task_id) or ("", "")
    return (split_partition(stored) or ("", -1))[1]


async def test_a_worker_drains_every_partition_and_follows_a_growth(
    client: Client, run_worker: Runner
) -> None:
    registry = TaskRegistry()
    registry.queue("hot", partitions=3)
    ran: list[str] = []

    @registry.task(name="work", queue="hot")
    async def work(ctx: TaskContext) -> None:
        ran.append(ctx.task_id)

    await run_worker(registry, ["hot"])
    admin = Admin(client)
    assert (await admin.queue("hot")).partitions == 3  # applied by the worker at start
    handles = await client.enqueue_many([{"task": "work", "queue": "hot"}] * 60)
    ids = [h.id for h in handles if not isinstance(h, Exception)]
    await wait_until(lambda: set(ids) <= set(ran), timeout=20, message="first 60 run")
    assert Counter(partition_of(i) for i in ids) == {0: 20, 1: 20, 2: 20}

    await admin.configure("hot", partitions=6)
    handles = await client.enqueue_many([{"task": "work", "queue": "hot"}] * 60)
    grown = [h.id for h in handles if not isinstance(h, Exception)]
    assert {partition_of(i) for i in grown} == set(range(6))
    await wait_until(lambda: set(grown) <= set(ran), timeout=20, message="tasks of new partitions")
    assert len(ran) == len(set(ran)) == 120
    # A handle of a task in a new partition waits on that partition's events.
    last = next(h for h in handles if not isinstance(h, Exception) and partition_of(h.id) == 5)
    assert (await last.result(timeout=10)).status.value == "succeeded"
    stats = await admin.queue("hot")
    assert (stats.depth, stats.in_flight, stats.partitions) == (0, 0, 6)


async def test_a_queue_among_many_that_grows_is_followed_within_seconds(
    client: Client, run_worker: Runner
) -> None:
    """The worker does not read every served queue's layout every second (one command each):
    it asks the queue registry which of them have a partition 1, which a growth registers
    before it raises the count, and reads those."""
    registry = TaskRegistry()
    ran: list[str] = []

    @registry.task(name="work", queue="grows")
    async def work(ctx: TaskContext) -> None:
        ran.append(ctx.task_id)

    others = [f"still-{i}" for i in range(60)]
    worker = await run_worker(registry, [*others, "grows"])
    await wait_until(lambda: worker.claimer.is_parked("grows"), message="grows is idle")
    await Admin(client).configure("grows", partitions=3)
    await wait_until(
        lambda: {"grows~1", "grows~2"} <= set(worker.ctx.by_name),
        timeout=10,  # a whole sweep of the 61 layouts takes 30 s
        message="the new partitions followed",
    )
    handles = await client.enqueue_many([{"task": "work", "queue": "grows"}] * 30)
    ids = [h.id for h in handles if not isinstance(h, Exception)]
    assert {partition_of(i) for i in ids} == {0, 1, 2}
    await wait_until(lambda: set(ids) <= set(ran), timeout=20, message="every partition drained")
