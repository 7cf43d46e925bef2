"""Queue limits through real workers: several workers together never run more of a queue's
tasks than its concurrency, and start them at its rate (counted from recorded starts)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dtq_core import Client, TaskContext, TaskRegistry, TaskRequest
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import wait_until

if TYPE_CHECKING:
    from conftest import Runner


async def test_three_workers_never_exceed_the_queue_concurrency(
    client: Client, run_worker: Runner
) -> None:
    registry = TaskRegistry()
    registry.queue("crm", concurrency=20)
    running = 0
    peak = 0
    done: list[str] = []

    @registry.task(name="call", queue="crm")
    async def call(ctx: TaskContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        done.append(ctx.task_id)

    for _ in range(3):
        await run_worker(registry, ["crm"], worker_concurrency=50)
    assert (await Admin(client).queue("crm")).concurrency == 20
    await client.enqueue_many([{"task": "call", "queue": "crm"}] * 300)
    await wait_until(lambda: len(done) == 300, timeout=30, message="300 tasks done")
    assert 15 <= peak <= 20, peak  # the limit holds, and the workers use it


async def test_workers_start_a_queues_tasks_at_its_rate(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()
    registry.queue("api", rate="100/s", burst=10)

    @registry.task(name="hit", queue="api")
    async def hit(ctx: TaskContext) -> None:
        return None

    for _ in range(2):
        await run_worker(registry, ["api"], worker_concurrency=50)
    handles = await client.enqueue_many([{"task": "hit", "queue": "api"}] * 150)
    for handle in handles:
        assert not isinstance(handle, Exception)
        await handle.result(timeout=20)
    records = [await client.get(h.id) for h in handles if not isinstance(h, Exception)]
    starts = sorted(r.started_at.timestamp() for r in records if r and r.started_at)
    assert len(starts) == 150
    # The burst starts at once, then one start every 10 ms (Redis time).
    span = starts[-1] - starts[0]
    expected = (150 - 10) / 100
    assert 0.9 * expected <= span <= 1.3 * expected, span


async def test_three_workers_never_exceed_a_group_limit_or_the_queue_limit(
    client: Client, run_worker: Runner
) -> None:
    """From a history of recorded starts and ends: at no moment do more than 5 tasks of one
    group, or 20 of the queue, run, and every group gets its turns."""
    registry = TaskRegistry()
    registry.queue("exports", concurrency=20, group_concurrency=5)
    history: list[tuple[int, str, int]] = []  # (order, group, +1 start / -1 end)
    done: list[str] = []

    @registry.task(name="export", queue="exports", group_by="customer")
    async def export(ctx: TaskContext, customer: str) -> None:
        history.append((len(history), customer, 1))
        await asyncio.sleep(0.01)
        history.append((len(history), customer, -1))
        done.append(ctx.task_id)

    for _ in range(3):
        await run_worker(registry, ["exports"], worker_concurrency=50)
    # A large tenant first, then eight small ones, in one submit: every group waits before
    # the workers start (submitted one by one on a loaded machine, the small tenants' last
    # tasks would arrive after much of the large one's backlog had run).
    customers = ["big"] * 120 + [f"small{n}" for n in range(8) for _ in range(10)]
    await client.enqueue_many(
        [
            TaskRequest(task="export", queue="exports", kwargs={"customer": c}, group=c)
            for c in customers
        ]
    )
    await wait_until(lambda: len(done) == 200, timeout=60, message="200 exports done")
    running: dict[str, int] = {}
    total = peak_total = 0
    peak: dict[str, int] = {}
    for _, group, step in history:
        running[group] = running.get(group, 0) + step
        total += step
        peak[group] = max(peak.get(group, 0), running[group])
        peak_total = max(peak_total, total)
    assert max(peak.values()) <= 5, peak
    assert peak_total <= 20, peak_total
    assert peak["big"] == 5  # the limits are used, not only respected
    # Fair turns: the small tenants finished long before the large one's backlog.
    ends = [group for _, group, step in history if step == -1]
    last_small = max(i for i, g in enumerate(ends) if g != "big")
    assert last_small < 150, last_small
