"""Catalogue A10 (docs/testing.md), in small: SIGKILL the scheduler leader while tasks fall due.

Two ``dtq-scheduler`` processes run against the suite's Redis with fast knobs (1 s lease,
50 ms tick). 300 delayed tasks fall due over about 3 s; the leader is killed with SIGKILL once
about a quarter of them were promoted. Every task must reach ``queued`` exactly once: each
task id appears once among the priority streams' entries (``lost=0``, ``doubled=0``). The
leaderless gap (kill → the follower's token in the lock) and the worst due→queued lateness are
recorded in ``.artifacts/faults.jsonl`` and bounded, generously for a shared machine, by the
lease TTL plus a tick plus a slack; the checker finds no lost task, orphan or unbounded key.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import time

import pytest
import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.history import check_history
from tests.chaos.conftest import FaultFigures

TASKS = 300
SPREAD_S = 3.0
TTL_S = 1.0
TICK_S = 0.05
SLACK_S = 3.0
"""Process scheduling noise on a loaded, shared CI machine, on top of TTL + tick."""

KNOBS = {
    "DTQ_LEADER_TTL_S": str(TTL_S),
    "DTQ_SCHEDULER_TICK_S": str(TICK_S),
    "DTQ_VISIBILITY_TIMEOUT_S": "2",
    "DTQ_HEARTBEAT_INTERVAL_S": "0.5",
    "DTQ_SCHEDULER_METRICS_PORT": "0",
    "DTQ_LOG_JSON": "true",
}


def holder_pid(token: str | None) -> int | None:
    """The pid inside a lock token ``<epoch>:<host>-<pid>-<random>``."""
    if token is None:
        return None
    replica = token.partition(":")[2]
    return int(replica.rsplit("-", 2)[1])


async def stream_counts(redis: aioredis.Redis, keys: Keys, queue: str) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for stream in keys.queue(queue).streams:
        for _, fields in await redis.xrange(stream):
            counts[fields["t"]] += 1
    return counts


async def statuses(
    redis: aioredis.Redis, keys: Keys, queue: str, rands: list[str]
) -> list[list[str]]:
    """``[status, due µs, queued µs]`` of each task, in one round trip."""
    qk = keys.queue(queue)
    async with redis.pipeline(transaction=False) as pipe:
        for rand in rands:
            await pipe.hmget(qk.task(rand), ["st", "due", "qt"])
        return list(await pipe.execute())


@pytest.mark.slow
async def test_sigkill_of_the_leader_loses_and_doubles_no_promotion(
    redis: aioredis.Redis, redis_url: str, client: Client, faults: FaultFigures
) -> None:
    keys = Keys(client.settings.namespace)
    queue = "failover"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTQ_")}
    env |= KNOBS | {"DTQ_REDIS_URL": redis_url}
    procs: list[asyncio.subprocess.Process] = []
    try:
        for _ in range(2):
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "dtq_scheduler_leader",
                    env=env,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                )
            )
        by_pid = {p.pid: p for p in procs}
        first = await wait_until(lambda: redis.get(keys.leader), timeout=15)
        leader = by_pid[holder_pid(first)]  # KeyError: a process we did not start leads
        follower = next(p for p in procs if p is not leader)

        results = await client.enqueue_many(
            [
                {
                    "task": "chaos.promote",
                    "queue": queue,
                    "delay_s": 0.2 + SPREAD_S * i / TASKS,
                    "args": [i],
                }
                for i in range(TASKS)
            ]
        )
        rands = [r.id.partition(":")[2] for r in results if not isinstance(r, Exception)]
        assert len(rands) == TASKS

        async def promoted_at_least(n: int) -> bool:
            rows = await statuses(redis, keys, queue, rands)
            return sum(1 for st, _, _ in rows if st == "queued") >= n

        await wait_until(lambda: promoted_at_least(TASKS // 4), timeout=10)
        leader.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        before_kill = sum(
            1 for st, _, _ in await statuses(redis, keys, queue, rands) if st == "queued"
        )

        async def follower_leads() -> bool:
            return holder_pid(await redis.get(keys.leader)) == follower.pid

        await wait_until(follower_leads, interval=0.005, timeout=TTL_S + 5)
        gap_s = time.monotonic() - killed_at
        await wait_until(lambda: promoted_at_least(TASKS), timeout=SPREAD_S + TTL_S + 10)

        counts = await stream_counts(redis, keys, queue)
        rows = await statuses(redis, keys, queue, rands)
        lost = sum(1 for r in rands if counts[r] == 0)
        doubled = sum(1 for r in rands if counts[r] > 1)
        lateness_s = max((int(qt) - int(due)) / 1e6 for _, due, qt in rows)
        epochs = (
            int(first.partition(":")[0]),
            int((await redis.get(keys.leader)).partition(":")[0]),
        )
        # No worker runs: every task ends queued, with exactly one undelivered entry.
        check = await check_history(
            redis, [r.id for r in results if not isinstance(r, Exception)], settled={"queued"}
        )
        faults.record(
            "A10 SIGKILL of the scheduler leader while delayed tasks fall due",
            check,
            promoted_before_kill=before_kill,
            leaderless_gap_s=round(gap_s, 3),
            max_lateness_s=round(lateness_s, 3),
            doubled_promotions=doubled,
            epochs=list(epochs),
        )
        check.assert_clean()
        assert before_kill < TASKS, "every task was promoted before the kill: nothing tested"
        assert lost == 0
        assert doubled == 0
        assert len(counts) == TASKS
        assert {st for st, _, _ in rows} == {"queued"}
        assert epochs[1] > epochs[0]
        assert gap_s <= TTL_S + TICK_S + SLACK_S
        assert lateness_s <= TTL_S + TICK_S + SLACK_S
        assert follower.returncode is None  # the survivor kept running throughout
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
            stderr = await proc.communicate()
            if stderr[1]:
                sys.stderr.write(stderr[1].decode(errors="replace")[-4000:])
