"""A13 (CI size): workers SIGKILLed and restarted every 2 s under a steady load. Nothing is
lost or finished twice, and the consumer groups do not grow with the restarts: every killed
incarnation's consumer is dropped once it holds nothing (RELIABILITY F7)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from dtq_core import Client, TaskStatus
from dtq_core.testing import RedisServer, wait_until
from dtq_core.testing.history import summarize
from dtq_core.testing.processes import FAST_ENV, ServiceProcess, services, worker_process

pytestmark = pytest.mark.slow

WORKERS = 3
RATE = 50
SECONDS = 16


async def test_a_crash_storm_loses_nothing_and_consumers_stay_bounded(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    workers = [worker_process(server.url, tmp_path / f"w{i}.log") for i in range(WORKERS)]
    scheduler = ServiceProcess(
        "dtq_scheduler_leader",
        [],
        {**FAST_ENV, "DTQ_REDIS_URL": server.url, "DTQ_RECONCILE_INTERVAL_S": "1"},
        tmp_path / "scheduler.log",
    )
    rng = random.Random(7)
    ids: list[str] = []
    kills = 0
    try:
        with services(scheduler, *workers):
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)
            start = time.monotonic()
            next_kill = start + 2
            for i in range(RATE * SECONDS):
                due = start + i / RATE
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
                ids.append((await client.enqueue("sleep", args=[0.05])).id)
                if time.monotonic() >= next_kill:
                    victim = rng.choice(workers)
                    victim.signal(signal.SIGKILL)
                    await asyncio.to_thread(victim.wait, 10)
                    victim.start()
                    kills += 1
                    next_kill += 2

            async def all_succeeded() -> bool:
                for task_id in ids:
                    record = await client.get(task_id)
                    if record is None or record.status is not TaskStatus.SUCCEEDED:
                        return False
                return True

            await wait_until(all_succeeded, timeout=60, interval=0.5, message="every task done")
            stream = client.queue_keys("default").streams[5]

            async def consumers() -> int:
                return len(await client.redis.xinfo_consumers(stream, "workers"))

            peak = await consumers()
            # The leader drops consumers idle for 3 visibility timeouts (6 s here).
            await wait_until(
                lambda: _at_most(consumers, WORKERS), timeout=30, message="consumers pruned"
            )
        summary = await summarize(client.redis, client.queue_keys("default"), set(ids))
        print(
            json.dumps(
                {
                    "test": "A13 crash storm (CI size)",
                    "kills": kills,
                    "consumers_at_the_end_of_the_load": peak,
                    **summary.as_dict(),
                }
            )
        )
        assert kills >= 6
        assert summary.lost == 0
        assert summary.dup_terminal == 0
        assert summary.terminal["task.succeeded"] == len(ids)
    finally:
        await client.aclose()
        server.stop()


async def _at_most(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() <= n
