"""G1 (CI smoke size): an open-loop producer at a fixed rate against a worker process, with
short retention. Everything completes, and Redis reaches a plateau: keys and memory stop
growing once the first records expire, so a queue that runs for days runs in bounded memory."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from dtq_core import Client, TaskStatus
from dtq_core.testing import RedisServer, wait_until
from dtq_core.testing.processes import services, worker_process

pytestmark = pytest.mark.slow

RATE = 200  # tasks a second, on a fixed schedule (open loop: no waiting for the worker)
SECONDS = 30
SAMPLE_S = 2.0


async def test_sustained_load_completes_and_redis_memory_plateaus(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    env = {"DTQ_RESULT_RETENTION_S": "1", "DTQ_EVENTS_MAXLEN": "1000"}
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

            async def done() -> bool:
                last = await client.get(ids[-1])
                return last is not None and last.status is TaskStatus.SUCCEEDED

            await wait_until(done, timeout=30, message="the last task")
        # Records are kept 1 s after success: every earlier one that is still there succeeded.
        statuses = [await client.get(t) for t in ids[-RATE // 2 :]]
        assert all(r is None or r.status is TaskStatus.SUCCEEDED for r in statuses)
        steady = [s for s in samples if s[0] >= 10]
        keys = [k for _, k, _ in steady]
        memory = [m for _, _, m in steady]
        print(
            json.dumps(
                {
                    "test": "G1 sustained load (smoke)",
                    "rate_per_s": RATE,
                    "seconds": SECONDS,
                    "producer_lag_s": round(lag, 3),
                    "keys": [k for _, k, _ in samples],
                    "used_memory_mib": [round(m / 2**20, 2) for _, _, m in samples],
                }
            )
        )
        # A plateau: about rate x retention records at any time, and no growth after warm-up.
        assert max(keys) < RATE * 5
        assert max(memory) - min(memory) < 2**20
        assert lag < 2  # the producer kept its schedule: the rate was really offered
    finally:
        await client.aclose()
        server.stop()
