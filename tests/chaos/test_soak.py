"""Sustained load, with Redis reaching a plateau.

G1 (CI smoke size): an open-loop producer at a fixed rate against a worker process, with
short retention. Everything completes, and Redis reaches a plateau: keys and memory stop
growing once the first records expire, so a queue that runs for days runs in bounded memory.
Every one of the 6,000 tasks is accounted for: its record expires a second after success, so
the checker counts it through the handler's side effects (``exec_end``) and the retained
events.

G2/G5 soak: the same kind of load with 5 % of the tasks failing for good into a small DLQ,
60 s in CI and 10 minutes with ``just soak`` (``DTQTEST_SOAK_S``); the dead records stay within
the DLQ cap, and the least-squares slopes of Redis' used_memory and the worker's RSS are
recorded with generous bounds."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.errors import QueueFullError
from dtq_core.infra.connection import connect
from dtq_core.messages import TaskRequest
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.figures import slope_per_minute
from dtq_devtools.testing.history import check_history, settle
from dtq_devtools.testing.processes import services, worker_process
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


SOAK_S = float(os.environ.get("DTQTEST_SOAK_S", "60"))
"""G2/G5: 60 s in CI; ``just soak`` runs 600 (nightly-style) or what it is given."""
SOAK_RATE = 100
FAIL_EVERY = 20  # one task in 20 (5 %) fails for good
SOAK_DLQ_MAXLEN = 20


async def test_soak_with_permanent_failures_keeps_records_bounded_and_memory_flat(
    tmp_path: Path, faults: FaultFigures
) -> None:
    """G2/G5 and the DLQ bound: an open-loop load where 5 % of the tasks fail for good, a DLQ
    capped far below the dead tasks the run makes, and a task retention of days. Every task is
    accounted for, the dead records never outnumber the DLQ cap (a trimmed entry's record goes
    with it), and Redis' used_memory and the worker's RSS have a flat least-squares slope."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    side_server = RedisServer(tmp_path / "side", appendonly=False)
    side_server.start()
    side = connect(side_server.url)
    env = {
        "DTQ_RESULT_RETENTION_S": "1",
        "DTQ_EVENTS_MAXLEN": "1000",
        "DTQ_DLQ_MAXLEN": str(SOAK_DLQ_MAXLEN),
        "DTQTEST_SIDE_URL": side_server.url,
    }
    client = Client.from_url(
        server.url,
        max_queue_depth=0,
        result_retention_s=1,
        events_maxlen=1000,
        reject_unknown_queues=False,
    )
    worker = worker_process(server.url, tmp_path / "worker.log", concurrency=16, env=env)
    sample_s = max(2.0, SOAK_S / 60)
    samples: list[tuple[float, int, int, int, int]] = []  # t, keys, dlq, used_memory, rss
    ids: list[str] = []
    try:
        with services(worker):
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)
            start = time.monotonic()
            next_sample = start
            total = int(SOAK_RATE * SOAK_S)
            for i in range(total):
                due = start + i / SOAK_RATE
                now = time.monotonic()
                if due > now:
                    await asyncio.sleep(due - now)
                if i % FAIL_EVERY == FAIL_EVERY - 1:
                    handle = await client.enqueue("fail_recorded")
                else:
                    handle = await client.enqueue("sleep", args=[0.002])
                ids.append(handle.id)
                if now >= next_sample:
                    info = await client.redis.info("memory")
                    dlq = await client.redis.xlen(client.keys.queue("default").dlq)
                    keys = await client.redis.dbsize()
                    samples.append(
                        (now - start, keys, dlq, info["used_memory"], worker.rss_bytes())
                    )
                    next_sample += sample_s
            lag = time.monotonic() - (start + SOAK_S)
            settle_s = await settle(client.redis, ids, timeout=30)
        check = await check_history(client.redis, ids, side=side)
        steady = [s for s in samples if s[0] >= min(15.0, SOAK_S / 4)]
        memory_slope = slope_per_minute([(t, m / 2**20) for t, _, _, m, _ in steady])
        rss_slope = slope_per_minute([(t, r / 2**20) for t, _, _, _, r in steady])
        faults.record(
            "G2/G5 soak with 5 % permanent failures",
            check,
            rate_per_s=SOAK_RATE,
            load_s=SOAK_S,
            dlq_maxlen=SOAK_DLQ_MAXLEN,
            dead_made=total // FAIL_EVERY,
            producer_lag_s=round(lag, 3),
            settle_s=round(settle_s, 2),
            used_memory_slope_mib_per_min=round(memory_slope, 3),
            worker_rss_slope_mib_per_min=round(rss_slope, 3),
            keys_sampled=[k for _, k, _, _, _ in samples],
            dlq_sampled=[d for _, _, d, _, _ in samples],
            used_memory_mib=[round(m / 2**20, 2) for _, _, _, m, _ in samples],
            worker_rss_mib=[round(r / 2**20, 1) for _, _, _, _, r in samples],
        )
        check.assert_clean()
        ended = check.statuses["succeeded"] + check.statuses["dead"] + check.expired_after_end
        assert ended == len(ids) == total
        # The dead tasks made far outnumber the cap; only the DLQ's own survive.
        assert total // FAIL_EVERY > 2 * SOAK_DLQ_MAXLEN
        assert check.statuses["dead"] <= SOAK_DLQ_MAXLEN
        assert max(d for _, _, d, _, _ in samples) <= SOAK_DLQ_MAXLEN
        assert max(k for _, k, _, _, _ in steady) < SOAK_RATE * 5 + SOAK_DLQ_MAXLEN
        # Generous bounds on a shared machine: the figures are the record.
        assert memory_slope < 2.0
        assert rss_slope < 20.0
        assert lag < SOAK_S
    finally:
        await side.aclose()
        await client.aclose()
        server.stop()
        side_server.stop()


BACKLOG_DEPTH = 1500
BACKLOG_HOLD_S = 10.0
BACKLOG_BATCH = 50


async def _waiting(client: Client, queue: str) -> int:
    """The queue's waiting tasks as admission counts them (each stream group's lag)."""
    total = 0
    for stream in client.keys.queue(queue).streams:
        if await client.redis.exists(stream):
            groups = await client.redis.xinfo_groups(stream)
            total += sum(int(g.get("lag") or 0) for g in groups)
    return total


async def _submit_batch(client: Client, ids: list[str]) -> int:
    """One batch of short tasks; the accepted ids are appended, the refusals counted (a
    refusal that is not admission control fails the test)."""
    replies = await client.enqueue_many(
        [TaskRequest(task="sleep", args=[0.005]) for _ in range(BACKLOG_BATCH)],
        return_exceptions=True,
    )
    refused = 0
    for reply in replies:
        if isinstance(reply, QueueFullError):
            refused += 1
        elif isinstance(reply, Exception):
            raise reply
        else:
            ids.append(reply.id)
    return refused


async def test_backlog_beyond_the_depth_limit_is_refused_then_drains_and_memory_returns(
    tmp_path: Path, faults: FaultFigures
) -> None:
    """G2: producers offer far more than the workers can run. Submits are refused once the
    queue holds DTQ_MAX_QUEUE_DEPTH waiting tasks (the SDK's QueueFullError, the API's 429),
    the depth never goes past it while the overload lasts, everything accepted drains, and
    once the results' retention has passed Redis' memory is back near where it started."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    side_server = RedisServer(tmp_path / "side", appendonly=False)
    side_server.start()
    side = connect(side_server.url)
    env = {
        "DTQ_RESULT_RETENTION_S": "1",
        "DTQ_EVENTS_MAXLEN": "100",
        "DTQTEST_SIDE_URL": side_server.url,
    }
    client = Client.from_url(
        server.url,
        max_queue_depth=BACKLOG_DEPTH,
        result_retention_s=1,
        events_maxlen=100,
        reject_unknown_queues=False,
    )
    worker = worker_process(server.url, tmp_path / "worker.log", concurrency=4, env=env)
    ids: list[str] = []
    try:
        with services(worker):
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)
            # Warm-up: the streams, groups and event stream exist, the first records expired.
            for _ in range(4):
                await _submit_batch(client, ids)
            await settle(client.redis, ids, timeout=30)
            await wait_until(lambda: _no_records(client), timeout=30)
            before = (await client.redis.info("memory"))["used_memory"]
            # Fill: submit as fast as one producer can until the first refusal.
            started = time.monotonic()
            warm = len(ids)
            while not await _submit_batch(client, ids):
                pass
            accepted_at_refusal = len(ids) - warm
            fill_s = time.monotonic() - started
            # Hold the overload: a batch every 10 ms, far above what 4 handlers run.
            refused, depths, peak = 0, [], before
            hold_start = time.monotonic()
            while time.monotonic() - hold_start < BACKLOG_HOLD_S:
                refused += await _submit_batch(client, ids)
                depths.append(await _waiting(client, "default"))
                peak = max(peak, (await client.redis.info("memory"))["used_memory"])
                await asyncio.sleep(0.01)
            depth_at_stop = await _waiting(client, "default")
            drain_start = time.monotonic()
            drain_s = await settle(client.redis, ids, timeout=60)
            drain_rate = depth_at_stop / max(time.monotonic() - drain_start, 1e-3)
            await wait_until(lambda: _no_records(client), timeout=30)
            after = (await client.redis.info("memory"))["used_memory"]
        check = await check_history(client.redis, ids, side=side)
        faults.record(
            "G2 backlog beyond the depth limit, then drain",
            check,
            depth_limit=BACKLOG_DEPTH,
            fill_s=round(fill_s, 2),
            accepted_at_first_refusal=accepted_at_refusal,
            refused=refused,
            max_depth_seen=max(depths),
            hold_s=BACKLOG_HOLD_S,
            drain_s=round(drain_s, 2),
            drain_rate_per_s=round(drain_rate, 1),
            used_memory_mib={
                "before": round(before / 2**20, 2),
                "peak": round(peak / 2**20, 2),
                "after": round(after / 2**20, 2),
            },
        )
        check.assert_clean()
        assert check.statuses["succeeded"] + check.expired_after_end == len(ids)
        # Refusals start at the limit, not before, and the overload never pushes past it.
        assert accepted_at_refusal >= BACKLOG_DEPTH
        assert refused > 0
        assert max(depths) <= BACKLOG_DEPTH
        # Memory back near its start (the catalogue's 10 %, or 256 KiB on a small Redis).
        assert peak - before > 512 * 1024  # the backlog did weigh on memory
        assert after - before <= max(before // 10, 256 * 1024)
    finally:
        await side.aclose()
        await client.aclose()
        server.stop()
        side_server.stop()


async def _no_records(client: Client) -> bool:
    """No task record is left (every result's retention has passed)."""
    async for _ in client.redis.scan_iter(match=f"{client.keys.ns}:{{*}}:t:*", count=1000):
        return False
    return True
