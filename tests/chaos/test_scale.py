"""G4 and G3: the big backlogs a dead worker or a burst of delayed tasks leave behind.

A worker that held 50,000 attempts dies: the others' reapers take every one back in bounded
script calls, and the tasks run. 100,000 delayed tasks fall due in the same second: the
leader promotes them in bounded batches, each once. In both, Redis' SLOWLOG (threshold 50 ms)
holds no function call, and no call was answered with BUSY: a script that walked a whole
backlog at once would stall every client of the Redis for as long as it ran.

The CI sizes are the full sizes when they fit in about a minute; ``DTQTEST_G4_TASKS`` and
``DTQTEST_G3_TASKS`` set others.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import StreamEntry, connect
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.history import check_history, queue_events, settle
from dtq_devtools.testing.processes import scheduler_process, services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

DUE_AFTER_S = 12
"""G3's tasks fall due this long after the first submit."""
SLOW_US = 50_000
"""A function call slower than this (50 ms) is a stall the clients of the Redis notice."""
LOGGED_US = 10_000
"""The test's SLOWLOG threshold: calls over 10 ms are recorded as figures."""


def _size(variable: str, default: int) -> int:
    return int(os.environ.get(variable) or default)


def _server(tmp_path: Path) -> RedisServer:
    server = RedisServer(
        tmp_path / "redis",
        appendonly=False,
        extra=("--slowlog-log-slower-than", str(LOGGED_US), "--slowlog-max-len", "1024"),
    )
    server.start()
    return server


async def _submit(client: Client, n: int, **fields: Any) -> list[str]:
    """``n`` tasks in batches of 5,000 (one pipelined round trip each)."""
    ids: list[str] = []
    for start in range(0, n, 5_000):
        batch = [TaskRequest(**fields) for _ in range(min(5_000, n - start))]
        handles = await client.enqueue_many(batch)
        ids += [h.id for h in handles if not isinstance(h, Exception)]
    return ids


async def _slow_calls(redis: aioredis.Redis) -> list[dict[str, Any]]:
    """The SLOWLOG's function and script calls (everything that runs Lua)."""
    entries = cast(list[dict[str, Any]], await redis.slowlog_get(1024))
    out = []
    for e in entries:
        raw = e.get("command", b"")
        command = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        if command.split(" ", 1)[0].upper() in ("FCALL", "FCALL_RO", "EVAL", "EVALSHA"):
            out.append({"us": int(e["duration"]), "command": command[:60]})
    return out


def _busy(*logs: str) -> int:
    return sum(log.count("BUSY") for log in logs)


async def test_g4_a_dead_worker_holding_50000_entries_is_reclaimed_in_bounded_calls(
    tmp_path: Path, faults: FaultFigures
) -> None:
    n = _size("DTQTEST_G4_TASKS", 50_000)
    server = _server(tmp_path)
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    side_url = server.url.replace("/0", "/1")
    side = connect(side_url)
    qk = client.queue_keys("default")
    try:
        ids = await _submit(client, n, task="echo")
        # The dead worker: it claimed everything (attempt 1 running, entries in its PEL) and
        # then never heartbeat again.
        held = 0
        while held < n:
            _, started = await client.scripts.claim(
                qk,
                consumer="dead-worker:000000",
                count=500,
                events_maxlen=10_000,
                retention_ms=86_400_000,
            )
            assert started, f"claimed {held} of {n}"
            held += len(started)
        pel = await client.redis.xpending(qk.streams[5], "workers")
        assert pel["pending"] == n
        await client.redis.slowlog_reset()
        env = {"DTQTEST_SIDE_URL": side_url}
        workers = [
            worker_process(server.url, tmp_path / f"w{i}.log", concurrency=32, env=env)
            for i in range(2)
        ]
        started_at = time.monotonic()
        with services(*workers):
            reclaimed_s = await _reclaimed(client, qk.streams[5], "dead-worker:000000", n)
            settle_s = await settle(client.redis, ids, timeout=240, interval=1.0)
            logs = [w.log() for w in workers]
        slow = await _slow_calls(client.redis)
        check = await check_history(client.redis, ids, side=side)
        requeued = sum(
            1
            for e in await queue_events(client.redis, qk)
            if e.type == "task.requeued" and e.reason == "lease_expired"
        )
        faults.record(
            f"G4 dead worker holding {n} pending entries",
            check,
            held_by_the_dead_worker=n,
            reclaimed_s=round(reclaimed_s, 2),
            drained_s=round(time.monotonic() - started_at, 2),
            settle_s=round(settle_s, 2),
            requeued_events_retained=requeued,
            function_calls_over_10ms=len(slow),
            slowest_function_us=max((s["us"] for s in slow), default=0),
            busy_errors=_busy(*logs),
        )
        assert len(ids) == n
        # The dead worker ran nothing: every execution is a peer's, each task once.
        check.assert_clean(max_dup_exec=0)
        assert check.statuses["succeeded"] == n
        stalls = [s for s in slow if s["us"] > SLOW_US]
        assert not stalls, f"function calls over {SLOW_US} us: {stalls[:5]}"
        assert _busy(*logs) == 0
    finally:
        await side.aclose()
        await client.aclose()
        server.stop()


async def _reclaimed(client: Client, stream: str, dead: str, n: int) -> float:
    """Seconds until the dead consumer holds nothing any more."""
    started = time.monotonic()

    async def dead_holds_nothing() -> bool:
        for c in await client.redis.xinfo_consumers(stream, "workers"):
            if c["name"] == dead:
                return int(c["pending"]) == 0
        return True

    await wait_until(dead_holds_nothing, timeout=120, interval=0.2, message=f"{n} reclaimed")
    return time.monotonic() - started


async def test_g3_100000_delayed_tasks_due_in_one_second_are_promoted_once_in_batches(
    tmp_path: Path, faults: FaultFigures
) -> None:
    n = _size("DTQTEST_G3_TASKS", 100_000)
    server = _server(tmp_path)
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    qk = client.queue_keys("default")
    try:
        seconds, _ = await client.redis.time()
        # Every task is due at one instant, after the last submit (100,000 take a few
        # seconds here); the leader is already running when the whole backlog falls due.
        eta = datetime.fromtimestamp(int(seconds) + DUE_AFTER_S, UTC)
        ids = await _submit(client, n, task="noop", eta=eta)
        assert await client.redis.zcard(qk.delayed) == n, "submits took longer than the delay"
        await client.redis.slowlog_reset()
        leader = scheduler_process(server.url, tmp_path / "scheduler.log")
        with services(leader):
            await wait_until(lambda: _past(client, eta), timeout=DUE_AFTER_S + 5)
            started_at = time.monotonic()
            await wait_until(
                lambda: _promoted_all(client, qk.delayed),
                timeout=120,
                interval=0.2,
                message=f"{n} promoted",
            )
            promoted_s = time.monotonic() - started_at
            log = leader.log()
        slow = await _slow_calls(client.redis)
        entries = await _stream_tasks(client.redis, qk.streams[5])
        batches = await _promotion_batches(client.redis, qk.events)
        check = await check_history(client.redis, ids, settled={"queued"})
        faults.record(
            f"G3 {n} delayed tasks due in one second",
            check,
            promoted_s=round(promoted_s, 2),
            stream_entries=len(entries),
            tasks_with_two_entries=len(entries) - len(set(entries)),
            promotion_calls_retained=len(batches),
            tasks_in_retained_promotions=sum(batches),
            largest_promotion_batch=max(batches, default=0),
            function_calls_over_10ms=len(slow),
            slowest_function_us=max((s["us"] for s in slow), default=0),
            busy_errors=_busy(log),
        )
        assert len(ids) == n
        check.assert_clean()
        assert check.statuses["queued"] == n
        # Each task promoted once: one stream entry per task, and the checker found no
        # entry that is not its task's own.
        assert len(entries) == n == len(set(entries))
        # In bounded calls: none promoted more than the leader's batch (100).
        assert max(batches, default=0) <= 100
        stalls = [s for s in slow if s["us"] > SLOW_US]
        assert not stalls, f"function calls over {SLOW_US} us: {stalls[:5]}"
        assert _busy(log) == 0
    finally:
        await client.aclose()
        server.stop()


async def _past(client: Client, instant: datetime) -> bool:
    seconds, micros = await client.redis.time()
    return datetime.fromtimestamp(int(seconds) + int(micros) / 1e6, UTC) > instant


async def _promotion_batches(redis: aioredis.Redis, events: str) -> list[int]:
    """Tasks per promote call: each call writes one ``task.queued`` entry naming its ids."""
    out: list[int] = []
    cursor = "-"
    while True:
        entries = cast(list[StreamEntry], await redis.xrange(events, min=cursor, count=5_000))
        if not entries:
            return out
        out += [
            len(fields["ids"].split(","))
            for _, fields in entries
            if fields.get("type") == "task.queued" and fields.get("reason") == "promoted"
        ]
        cursor = "(" + entries[-1][0]


async def _promoted_all(client: Client, delayed: str) -> bool:
    return int(await client.redis.zcard(delayed)) == 0


async def _stream_tasks(redis: aioredis.Redis, stream: str) -> list[str]:
    """The task of every entry of a stream, in order."""
    out: list[str] = []
    cursor = "-"
    while True:
        entries = cast(list[StreamEntry], await redis.xrange(stream, min=cursor, count=5_000))
        if not entries:
            return out
        out += [fields.get("t", "") for _, fields in entries]
        cursor = "(" + entries[-1][0]
