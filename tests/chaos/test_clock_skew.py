"""A14: dtq processes on hosts whose clocks are wrong. The worker runs an hour ahead and the
scheduler ten minutes behind (libfaketime); every due time, lease and retry delay is Redis
time (DESIGN rule 4), so nothing is promoted early or late and no lease is reclaimed by
mistake."""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from dtq_core import Client, TaskStatus
from dtq_core.testing import RedisServer, wait_until
from dtq_core.testing.history import queue_events
from dtq_core.testing.processes import scheduler_process, services, worker_process

pytestmark = pytest.mark.slow

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


def skewed(offset: str) -> dict[str, str]:
    return {"LD_PRELOAD": str(FAKETIME), "FAKETIME": offset}


def first_log_time(log: Path) -> float | None:
    """The wall-clock time the process believed it was when it wrote its first JSON line
    (``None`` until it has written one)."""
    for line in log.read_text().splitlines():
        if line.startswith("{") and "timestamp" in line:
            stamp = json.loads(line)["timestamp"]
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def need_faketime() -> None:
    if not FAKETIME.exists():
        if os.environ.get("CI"):
            pytest.fail("libfaketime is not installed (apt-get install -y faketime)")
        pytest.skip("libfaketime is not installed (apt-get install -y faketime)")


async def test_skewed_clocks_change_no_timing(redis_server: RedisServer, tmp_path: Path) -> None:
    need_faketime()
    client = Client.from_url(redis_server.url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    worker = worker_process(
        redis_server.url, tmp_path / "worker.log", concurrency=8, env=skewed("+1h")
    )
    scheduler = scheduler_process(redis_server.url, tmp_path / "scheduler.log", env=skewed("-10m"))
    try:
        with services(worker, scheduler):
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)
            # The premise: both processes really live in other times.
            worker_time = await wait_until(
                lambda: asyncio.to_thread(first_log_time, worker.log_path), timeout=30
            )
            scheduler_time = await wait_until(
                lambda: asyncio.to_thread(first_log_time, scheduler.log_path), timeout=30
            )
            now = time.time()
            assert worker_time - now > 3000
            assert now - scheduler_time > 500

            delayed = [await client.enqueue("noop", delay_s=2.0) for _ in range(6)]
            long = [await client.enqueue("sleep", args=[3.0]) for _ in range(4)]  # > VT (2 s)
            flaky = await client.enqueue("flaky", kwargs={"fail_until": 2})
            handles = [*delayed, *long, flaky]

            async def all_done() -> bool:
                for h in handles:
                    record = await client.get(h.id)
                    if record is None or record.status is not TaskStatus.SUCCEEDED:
                        return False
                return True

            await wait_until(all_done, timeout=60, interval=0.2, message="every task done")
        waits = []
        for h in delayed:
            record = await client.get(h.id)
            assert record is not None
            assert record.started_at is not None
            waits.append((record.started_at - record.created_at).total_seconds())
        long_attempts = [(await client.get(h.id)).attempts for h in long]  # type: ignore[union-attr]
        flaky_record = await client.get(flaky.id)
        assert flaky_record is not None
        events = await queue_events(client.redis, client.queue_keys("default"))
        reclaimed = [e for e in events if e.type == "task.requeued"]
        print(
            json.dumps(
                {
                    "test": "A14 clock skew (worker +1h, scheduler -10m)",
                    "delayed_wait_s": [round(w, 3) for w in sorted(waits)],
                    "long_task_attempts": long_attempts,
                    "reclaimed": len(reclaimed),
                    "flaky_attempts": flaky_record.attempts,
                }
            )
        )
        assert all(2.0 <= w < 3.5 for w in waits), waits  # neither early nor late
        assert long_attempts == [1, 1, 1, 1]
        assert reclaimed == []
        assert flaky_record.attempts == 2
    finally:
        await client.aclose()
