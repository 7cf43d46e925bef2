"""The per-minute history end to end: a real worker's finish calls count what its handlers
did (successes, retries, failures and run times), the leader notes the depths, and the admin
reads one queue or every queue back, with a partitioned queue's partitions added up. Runs on
every topology (``--redis cluster``: each partition in its own slot on its own master)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from dtq_core import Client, PermanentError, Retry, TaskContext, TaskRegistry
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import wait_until
from dtq_scheduler_leader.scheduler import Scheduler

Stack = Callable[..., Awaitable[Scheduler]]
"""``await stack(registry)`` (tests/integration/conftest.py)."""


def handlers() -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task(name="h.sleep")
    async def sleep(ctx: TaskContext, seconds: float) -> None:
        await asyncio.sleep(seconds)  # the handler's work: a run time to measure

    @registry.task(name="h.flaky", max_attempts=3)
    async def flaky(ctx: TaskContext) -> str:
        if ctx.attempt == 1:
            raise Retry(delay_s=0.01)
        return "ok"

    @registry.task(name="h.fail", max_attempts=1)
    async def fail(ctx: TaskContext) -> None:
        raise PermanentError("no")

    return registry


async def test_a_workers_outcomes_and_the_leaders_depths_are_in_the_history(
    client: Client, stack: Stack
) -> None:
    admin = Admin(client)
    await admin.create_queue("default")
    await admin.configure("default", partitions=2)
    scheduler = await stack(handlers())
    handles = [await client.enqueue("h.sleep", [0.05], queue="default") for _ in range(4)]
    handles += [await client.enqueue("h.flaky", queue="default") for _ in range(2)]
    handles += [await client.enqueue("h.fail", queue="other")]
    outcomes = [await h.result(timeout=30) for h in handles]
    assert [o.status for o in outcomes] == ["succeeded"] * 6 + ["dead"]
    await client.enqueue("h.sleep", [0], queue="other", delay_s=3600)  # a delayed one

    history = await admin.history("1h", "default")
    assert history.queues == ["default"]
    assert (sum(history.submitted), sum(history.succeeded), sum(history.retried)) == (6, 6, 2)
    assert (sum(history.failed), sum(history.run_count)) == (0, 8)
    longest = max(v for v in history.run_max_s if v is not None)
    assert 0.05 <= longest < 30
    assert sum(history.run_total_s) >= 4 * 0.05

    everything = await admin.history("6h")
    assert everything.queues == ["default", "other"]
    assert len(everything.succeeded) == 360
    assert (sum(everything.submitted), sum(everything.failed)) == (8, 1)

    # The leader notes once a minute: a note taken now holds the delayed task.
    await scheduler.history.step()
    noted = await admin.history("1h", "other")
    assert next(v for v in reversed(noted.delayed) if v is not None) == 1
    await wait_until(lambda: scheduler.history.noted == 3, message="every stored queue noted")
