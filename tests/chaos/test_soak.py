"""G1 (CI smoke size): an open-loop producer at a fixed rate against a worker process, with
short retention. Everything completes, and Redis reaches a plateau: keys and memory stop
growing once the first records expire, so a queue that runs for days runs in bounded memory.
Every one of the 6,000 tasks is accounted for: its record expires a second after success, so
the checker counts it through the handler's side effects (``exec_end``) and the retained
events."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.connection import connect
from dtq_core.testing import RedisServer, wait_until
from dtq_core.testing.history import check_history, settle
from dtq_core.testing.processes import services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

RATE = 200  # tasks a second, on a fixed schedule (open loop: no waiting for the worker)
SECONDS = 30
SAMPLE_S = 2.0


async def test_sustained_load_completes_and_redis_memory_plateaus(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    # The side effects go to a Redis of their own: they grow with the load, and the plateau
    # is measured on the queue's Redis alone.
    side_server = RedisServer(tmp_path / "side", appendonly=False)
    side_server.start()
    side_url = side_server.url
    side = connect(side_url)
    env = {
        "DTQ_RESULT_RETENTION_S": "1",
        "DTQ_EVENTS_MAXLEN": "1000",
        "DTQTEST_SIDE_URL": side_url,
    }
    client = Client.from_url(
        server.url,
        max_queue_depth=0,
        result_retention_s=1,
        events_maxlen=1000,
        reject_unknown_queues=False,
    )
    worker = worker_process(server.url, tmp_path / "worker.log", concurrency=16, env=env)
    samples: list[tuple[float, int, int]] = []
    ids: list[str] = []
    try:
        with services(worker):
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)
            start = time.monotonic()
            next_sample = start
            for i in range(RATE * SECONDS):
                due = start + i / RATE
                now = time.monotonic()
                if due > now:
                    await asyncio.sleep(due - now)
                ids.append((await client.enqueue("sleep", args=[0.002])).id)
                if now >= next_sample:
                    info = await client.redis.info("memory")
                    samples.append((now - start, await client.redis.dbsize(), info["used_memory"]))
                    next_sample += SAMPLE_S
            lag = time.monotonic() - (start + SECONDS)
            settle_s = await settle(client.redis, ids, timeout=30)
        check = await check_history(client.redis, ids, side=side)
        steady = [s for s in samples if s[0] >= 10]
        keys = [k for _, k, _ in steady]
        memory = [m for _, _, m in steady]
        faults.record(
            "G1 sustained load (CI size)",
            check,
            rate_per_s=RATE,
            load_s=SECONDS,
            producer_lag_s=round(lag, 3),
            settle_s=round(settle_s, 2),
            keys_sampled=[k for _, k, _ in samples],
            used_memory_mib=[round(m / 2**20, 2) for _, _, m in samples],
        )
        assert len(ids) == RATE * SECONDS
        check.assert_clean()
        assert check.statuses["succeeded"] + check.expired_after_end == len(ids)
        # A plateau: about rate x retention records at any time, and no growth after warm-up.
        assert max(keys) < RATE * 5
        assert max(memory) - min(memory) < 2**20
        # The load was offered (at least half the rate): a generous bound on a shared machine.
        assert lag < SECONDS
    finally:
        await side.aclose()
        await client.aclose()
        server.stop()
        side_server.stop()
