"""A13 (CI size): workers SIGKILLed and restarted every 2 s under a steady load. Nothing is
lost or finished twice, and the consumer groups do not grow with the restarts: every killed
incarnation's consumer is dropped once it holds nothing (failure mode F7, docs/failure-modes.md)."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.infra.connection import connect
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import RedisServer, run_seed, wait_until
from dtq_devtools.testing.history import check_history, settle
from dtq_devtools.testing.processes import FAST_ENV, ServiceProcess, services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

WORKERS = 3
CONCURRENCY = 4
RATE = 50
SECONDS = 16
GROUPS = 5
GROUP_LIMIT = 2
"""Half the tasks go to five groups of at most two running each (docs/flow-control.md)."""


async def test_a_crash_storm_loses_nothing_and_consumers_stay_bounded(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    side_url = server.url.replace("/0", "/1")
    side = connect(side_url)
    workers = [
        worker_process(
            server.url,
            tmp_path / f"w{i}.log",
            concurrency=CONCURRENCY,
            env={"DTQTEST_SIDE_URL": side_url},
        )
        for i in range(WORKERS)
    ]
    scheduler = ServiceProcess(
        "dtq_scheduler_leader",
        [],
        {**FAST_ENV, "DTQ_REDIS_URL": server.url, "DTQ_RECONCILE_INTERVAL_S": "1"},
        tmp_path / "scheduler.log",
    )
    rng = random.Random(run_seed())  # which worker dies when: replay with DTQTEST_SEED
    ids: list[str] = []
    kills = 0
    try:
        with services(scheduler, *workers):
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)
            await Admin(client).configure("default", group_concurrency=GROUP_LIMIT)
            qk = client.queue_keys("default")
            slot_peak = 0
            start = time.monotonic()
            next_kill = start + 2
            for i in range(RATE * SECONDS):
                due = start + i / RATE
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
                group = f"tenant-{i % GROUPS}" if i % 2 else None
                ids.append((await client.enqueue("sleep", args=[0.05], group=group)).id)
                if time.monotonic() >= next_kill:
                    for n in range(GROUPS):
                        slots = await client.redis.scard(f"{qk.group(f'tenant-{n}')}:r")
                        slot_peak = max(slot_peak, slots)
                    victim = rng.choice(workers)
                    victim.signal(signal.SIGKILL)
                    await asyncio.to_thread(victim.wait, 10)
                    victim.start()
                    kills += 1
                    next_kill += 2

            settle_s = await settle(client.redis, ids, timeout=60, interval=0.5)
            stream = client.queue_keys("default").streams[5]

            async def consumers() -> int:
                return len(await client.redis.xinfo_consumers(stream, "workers"))

            peak = await consumers()
            # The leader drops consumers idle for 3 visibility timeouts (6 s here).
            await wait_until(
                lambda: _at_most(consumers, WORKERS), timeout=30, message="consumers pruned"
            )
        check = await check_history(client.redis, ids, side=side)
        faults.record(
            "A13 crash storm (SIGKILL every 2 s, CI size)",
            check,
            kills=kills,
            consumers_at_the_end_of_the_load=peak,
            group_slots_peak=slot_peak,
            settle_s=round(settle_s, 2),
        )
        assert kills >= 6
        # A killed worker runs at most CONCURRENCY handlers that a peer then runs again.
        check.assert_clean(max_dup_exec=kills * CONCURRENCY)
        assert check.statuses["succeeded"] == len(ids)
        # One consumer per worker incarnation at most: restarts leak none beyond that.
        assert peak <= WORKERS + kills
        # Group slots: never more taken than the limit, none leaked once everything finished
        # (a killed worker's slots free when its attempts are reclaimed, never twice).
        assert slot_peak <= GROUP_LIMIT
        assert [k async for k in client.redis.scan_iter(match=f"{qk.prefix}g:*")] == []
        assert int(await client.redis.get(qk.groups_waiting) or 0) == 0
    finally:
        await side.aclose()
        await client.aclose()
        server.stop()


async def _at_most(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() <= n
