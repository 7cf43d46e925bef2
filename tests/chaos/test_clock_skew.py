"""A14: dtq processes on hosts whose clocks are wrong. The worker runs an hour ahead and the
scheduler ten minutes behind (libfaketime); every due time, lease and retry delay is Redis
time (docs/failure-modes.md, F16), so nothing is promoted early or late and no lease is reclaimed by
mistake."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.history import check_history, queue_events, settle
from dtq_devtools.testing.processes import scheduler_process, services, worker_process
from dtq_devtools.testing.tools import libfaketime
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow


def skewed(offset: str) -> dict[str, str]:
    return {"LD_PRELOAD": libfaketime(), "FAKETIME": offset}


def first_log_time(log: Path) -> float | None:
    """The wall-clock time the process believed it was when it wrote its first JSON line
    (``None`` until it has written one)."""
    for line in log.read_text().splitlines():
        if line.startswith("{") and "timestamp" in line:
            stamp = json.loads(line)["timestamp"]
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


async def test_skewed_clocks_change_no_timing(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    libfaketime()  # skips, or fails under CI, before anything starts
    client = Client.from_url(redis_server.url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    side_url = redis_server.url.replace("/0", "/1")
    side = connect(side_url)
    worker = worker_process(
        redis_server.url,
        tmp_path / "worker.log",
        concurrency=8,
        env={**skewed("+1h"), "DTQTEST_SIDE_URL": side_url},
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

            settle_s = await settle(client.redis, [h.id for h in handles], timeout=60)
        check = await check_history(client.redis, [h.id for h in handles], side=side)
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
        faults.record(
            "A14 clock skew (worker +1h, scheduler -10m)",
            check,
            delayed_wait_s=[round(w, 3) for w in sorted(waits)],
            long_task_attempts=long_attempts,
            reclaimed=len(reclaimed),
            flaky_attempts=flaky_record.attempts,
            settle_s=round(settle_s, 2),
        )
        check.assert_clean(max_dup_exec=0)
        assert check.statuses["succeeded"] == len(handles)
        # Never early; and not late by anything like the skews (600 s, 3,600 s): the upper
        # bound is generous, for a loaded machine.
        assert all(2.0 <= w < 2.0 + 20 for w in waits), waits
        assert long_attempts == [1, 1, 1, 1]
        assert reclaimed == []
        assert flaky_record.attempts == 2
    finally:
        await side.aclose()
        await client.aclose()
