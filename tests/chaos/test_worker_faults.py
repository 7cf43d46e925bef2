"""Worker faults across real processes: kill -9, SIGTERM drain, poison tasks, zombies.

Each test checks the whole history (``dtq_devtools.testing.history``) and records its figures in
``.artifacts/faults.jsonl`` (docs/testing.md, "Figures").
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from dtq_core import Client, TaskRequest, TaskStatus
from dtq_core.errors import RedisUnavailableError
from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, free_port, wait_until
from dtq_devtools.testing.history import check_history, queue_events, settle
from dtq_devtools.testing.processes import services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow


async def running_count(client: Client) -> int:
    info = await client.redis.xinfo_groups(client.queue_keys("default").streams[5])
    return int(info[0]["pending"]) if info else 0


async def test_kill9_mid_task_loses_nothing(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    env = {"DTQTEST_SIDE_URL": url.replace("/0", "/1")}
    w1 = worker_process(url, tmp_path / "w1.log", concurrency=4, env=env)
    w2 = worker_process(url, tmp_path / "w2.log", concurrency=4, env=env)
    try:
        with services(w1):
            handles = await client.enqueue_many(
                [TaskRequest(task="sleep", args=[1.0]) for _ in range(40)]
            )
            ids = [h.id for h in handles if not isinstance(h, Exception)]
            await wait_until(lambda: running_count(client), timeout=20)
            await wait_until(lambda: _running_on(client, ids, 4), timeout=20, message="4 running")
            w2.start()
            inflight = await _count_status(client, ids, TaskStatus.RUNNING)
            killed_at = time.time()
            w1.signal(signal.SIGKILL)
            settled_s = await settle(client.redis, ids, timeout=90)
        check = await check_history(client.redis, ids, side=side)
        events = await queue_events(client.redis, client.queue_keys("default"))
        requeued = [e for e in events if e.type == "task.requeued" and e.reason == "lease_expired"]
        delays = sorted(e.ts - killed_at for e in requeued)
        faults.record(
            "A1 kill -9 of a worker mid-task",
            check,
            inflight_at_kill=inflight,
            redelivered=len(requeued),
            redelivery_delay_s_min=round(delays[0], 2) if delays else None,
            redelivery_delay_s_max=round(delays[-1], 2) if delays else None,
            settle_s=round(settled_s, 2),
        )
        assert len(ids) == 40
        check.assert_clean(max_dup_exec=inflight)
        assert check.statuses["succeeded"] == 40
        assert 1 <= len(requeued) <= inflight
        # Redelivered when the lease ran out, not before: the lease was last extended up to
        # one renewal interval (a third of the 2 s visibility timeout) before the kill.
        assert delays[0] >= 1.0
    finally:
        w2.stop()
        await side.aclose()
        await client.aclose()


async def _count_status(client: Client, ids: list[str], status: TaskStatus) -> int:
    n = 0
    for task_id in ids:
        record = await client.get(task_id)
        if record is not None and record.status is status:
            n += 1
    return n


async def _running_on(client: Client, ids: list[str], n: int) -> bool:
    return await _count_status(client, ids, TaskStatus.RUNNING) >= n


async def test_sigterm_drain_hands_back_at_once(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    """A5: unfinished work is handed back at drain's end, and a peer starts it well before
    the visibility timeout (set to 20 s here)."""
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    slow = worker_process(
        url,
        tmp_path / "slow.log",
        concurrency=2,
        env={
            "DTQTEST_SLOW": "1",
            "DTQ_DRAIN_TIMEOUT_S": "1",
            "DTQ_VISIBILITY_TIMEOUT_S": "20",
            "DTQ_HEARTBEAT_INTERVAL_S": "2",
        },
    )
    peer = worker_process(
        url,
        tmp_path / "peer.log",
        concurrency=2,
        env={"DTQ_VISIBILITY_TIMEOUT_S": "20", "DTQ_HEARTBEAT_INTERVAL_S": "2"},
    )
    try:
        with services(slow):
            handles = [await client.enqueue("slow_here", args=[60]) for _ in range(2)]
            ids = [h.id for h in handles]
            await wait_until(lambda: _running_on(client, ids, 2), timeout=20)
            peer.start()
            await wait_until(lambda: _workers_at_least(client, 2), timeout=20)
            t_term = time.time()
            slow.signal(signal.SIGTERM)
            code = await asyncio.to_thread(slow.wait, 10)
            exit_s = time.time() - t_term
            await settle(client.redis, ids, timeout=15)
        check = await check_history(client.redis, ids)
        events = await queue_events(client.redis, client.queue_keys("default"))
        handed = [e for e in events if e.type == "task.requeued" and e.reason == "drain_timeout"]
        restarted = [e for e in events if e.type == "task.started" and e.ts > t_term]
        gap = max(s.ts for s in restarted) - min(h.ts for h in handed)
        faults.record(
            "A5 SIGTERM, drain budget shorter than the tasks",
            check,
            exit_code=code,
            exit_s=round(exit_s, 2),
            handed_back=len(handed),
            hand_back_to_restart_s=round(gap, 3),
        )
        check.assert_clean()
        assert code == 0  # within slow.wait(10): at the drain's end, long before the tasks'
        assert len(handed) == 2
        slow_consumers = {e.worker for e in events if e.type == "task.started" and e.ts < t_term}
        assert all(r.worker not in slow_consumers for r in restarted)
        # Restarted at once, not after the visibility timeout (20 s here); a generous bound.
        assert gap < 20 / 2
        for task_id in ids:
            record = await client.get(task_id)
            assert record is not None
            assert record.status is TaskStatus.SUCCEEDED
            # The hand-back gave the attempt back: the peer's run is attempt 1 again.
            assert record.attempts == 1
    finally:
        peer.stop()
        await client.aclose()


async def test_sigterm_drain_within_budget_finishes_in_place(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    """A4: a SIGTERM with a drain budget longer than the running tasks. The worker claims
    nothing more, hands its prefetched tasks back at once (a peer starts them), lets the
    running ones finish and ack where they are (attempt 1, run once), and exits 0."""
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    env = {"DTQTEST_SIDE_URL": url.replace("/0", "/1"), "DTQ_DRAIN_TIMEOUT_S": "5"}
    w1 = worker_process(url, tmp_path / "w1.log", concurrency=4, env=env)
    w2 = worker_process(url, tmp_path / "w2.log", concurrency=4, env=env)
    try:
        with services(w1):
            handles = [await client.enqueue("sleep", args=[1.5]) for _ in range(12)]
            ids = [h.id for h in handles]
            await wait_until(lambda: _running_on(client, ids, 4), timeout=20, message="4 running")
            t_peer = time.time()
            w2.start()
            await wait_until(lambda: _workers_at_least(client, 2), timeout=20)
            t_term = time.time()
            w1.signal(signal.SIGTERM)
            code = await asyncio.to_thread(w1.wait, 15)
            exit_s = time.time() - t_term
            await settle(client.redis, ids, timeout=30)
            w2.stop()
        events = await queue_events(client.redis, client.queue_keys("default"))
        check = await check_history(client.redis, ids, side=side)
        w1_consumers = {e.worker for e in events if e.type == "task.started" and e.ts < t_peer}
        late_claims = [
            e
            for e in events
            if e.type == "task.started" and e.ts > t_term and e.worker in w1_consumers
        ]
        handed = [e for e in events if e.type == "task.requeued" and e.ts >= t_term]
        faults.record(
            "A4 SIGTERM, drain budget longer than the tasks",
            check,
            exit_code=code,
            exit_s=round(exit_s, 2),
            claims_after_sigterm=len(late_claims),
            prefetched_handed_back=len(handed),
        )
        check.assert_clean(max_dup_exec=0)  # the running ones finished where they ran
        assert code == 0
        assert exit_s < 5  # before the drain budget ran out: the tasks finished in place
        assert late_claims == []
        assert check.statuses["succeeded"] == 12
        for task_id in ids:
            record = await client.get(task_id)
            assert record is not None
            assert (record.status, record.attempts) == (TaskStatus.SUCCEEDED, 1)
    finally:
        w2.stop()
        await side.aclose()
        await client.aclose()


async def _workers_at_least(client: Client, n: int) -> bool:
    return int(await client.redis.zcard(client.keys.workers)) >= n


async def test_poison_task_that_kills_its_worker_ends_in_dlq(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    """A7: attempts are counted at claim, so three worker deaths bury the task."""
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    handle = await client.enqueue("kill_worker", max_attempts=3)
    deaths = 0
    workers = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            record = await client.get(handle.id)
            assert record is not None
            if record.status.terminal:
                break
            if not workers or not workers[-1].alive():
                if workers:
                    deaths += 1
                w = worker_process(url, tmp_path / f"w{len(workers)}.log", concurrency=1)
                workers.append(w.start())
            await asyncio.sleep(0.05)
        for w in workers:
            w.stop()
        record = await client.get(handle.id)
        assert record is not None
        check = await check_history(client.redis, [handle.id])
        faults.record(
            "A7 poison task that kills its worker",
            check,
            worker_deaths=deaths,
            status=record.status.value,
            attempts=record.attempts,
        )
        check.assert_clean()
        assert record.status is TaskStatus.DEAD
        assert record.attempts == 3
        assert deaths == 3
        assert [e.reason for e in record.errors] == ["lease_expired"] * 3
        assert await client.redis.xlen(client.queue_keys("default").dlq) == 1
    finally:
        for w in workers:
            w.stop()
        await client.aclose()


async def test_zombie_worker_cannot_finish_a_reclaimed_task(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    """A3: a worker paused past the visibility timeout loses its lease; when it resumes, its
    outcome is refused and the peer's attempt stands. The zombie says so in its metrics: each
    attempt it held is counted once, as a lost lease (noticed by its heartbeat, the handler
    cancelled) or as a refused finish (the handler ended first), and no entry went missing."""
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    env = {"DTQTEST_SIDE_URL": url.replace("/0", "/1")}
    zombie = worker_process(
        url,
        tmp_path / "zombie.log",
        concurrency=2,
        env={**env, "DTQ_WORKER_METRICS_PORT": str(free_port())},
    )
    peer = worker_process(url, tmp_path / "peer.log", concurrency=2, env=env)
    refused = ("dtq_lease_lost_total", "dtq_stale_finish_total")
    try:
        with services(zombie):
            handles = [await client.enqueue("sleep", args=[1.5]) for _ in range(2)]
            ids = [h.id for h in handles]
            await wait_until(lambda: _running_on(client, ids, 2), timeout=20)
            await wait_until(zombie.metrics_port, timeout=10, message="zombie's metrics")
            zombie.signal(signal.SIGSTOP)
            peer.start()
            await settle(client.redis, ids, timeout=30)
            zombie.signal(signal.SIGCONT)

            def noticed() -> float:
                return sum(zombie.metric(name) for name in refused)

            await wait_until(
                lambda: asyncio.to_thread(noticed), timeout=20, message="zombie noticed"
            )
            await wait_until(lambda: asyncio.to_thread(lambda: noticed() >= len(ids)), timeout=10)
            counted = {
                name: zombie.metric(name) for name in (*refused, "dtq_stream_entry_lost_total")
            }
            assert zombie.alive()
        check = await check_history(client.redis, ids, side=side)
        faults.record("A3 zombie worker (SIGSTOP past the visibility timeout)", check, **counted)
        check.assert_clean(max_dup_exec=len(ids))
        assert check.unexpected == []
        assert counted["dtq_lease_lost_total"] + counted["dtq_stale_finish_total"] == len(ids)
        assert counted["dtq_stream_entry_lost_total"] == 0
        for task_id in ids:
            record = await client.get(task_id)
            assert record is not None
            assert record.status is TaskStatus.SUCCEEDED
            assert record.attempts == 2
            assert record.errors[0].reason == "lease_expired"
    finally:
        peer.stop()
        await side.aclose()
        await client.aclose()


async def test_redis_restart_from_aof_loses_no_acknowledged_task(
    tmp_path: Path, faults: FaultFigures
) -> None:
    """B1: kill -9 of redis-server mid-run, restarted on its AOF: every task whose submit
    was acknowledged ends succeeded; the worker reconnects by itself (same PID). A submit
    refused while Redis is away (``RedisUnavailableError``, and only that) is retried with its
    idempotency key, so a refusal whose write did land makes no second task."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    url = server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    worker = worker_process(url, tmp_path / "w.log", concurrency=8)
    accepted: list[str] = []
    refused = 0
    try:
        with services(worker):
            for i in range(300):
                if i == 120:
                    server.kill()
                    restart = asyncio.get_running_loop().run_in_executor(None, _restart, server)
                while True:
                    try:
                        h = await client.enqueue("sleep", args=[0.01], idempotency_key=f"k{i}")
                        accepted.append(h.id)
                        break
                    except RedisUnavailableError:
                        refused += 1
                        await asyncio.sleep(0.05)
                await asyncio.sleep(0.01)
            await restart
            pid = worker.pid
            settled_s = await settle(client.redis, accepted, timeout=60)
            assert worker.alive()
            assert worker.pid == pid
        check = await check_history(client.redis, accepted)
        faults.record(
            "B1 redis kill -9, restart from its AOF",
            check,
            refused_submits=refused,
            settle_s=round(settled_s, 2),
        )
        check.assert_clean()
        assert refused > 0  # the outage did meet submits
        assert len(set(accepted)) == 300
        assert check.statuses["succeeded"] == 300
    finally:
        await client.aclose()
        server.stop()


def _restart(server: RedisServer) -> None:
    time.sleep(0.5)
    server.start()


async def test_heartbeat_starvation_is_what_the_docs_say(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    """A6: a CPU-bound plain ``def`` handler running past the visibility timeout keeps its
    lease (it runs in a thread; the loop keeps beating). An ``async def`` handler that blocks
    the loop past it is reclaimed and run again elsewhere, and the blocked worker's late
    outcome is refused (docs/task-lifecycle.md, "Long handlers")."""
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    env = {"DTQTEST_SIDE_URL": url.replace("/0", "/1")}
    w1 = worker_process(url, tmp_path / "w1.log", concurrency=2, env=env)
    w2 = worker_process(url, tmp_path / "w2.log", concurrency=2, env=env)
    try:
        with services(w1, w2):
            await wait_until(lambda: _workers_at_least(client, 2), timeout=30)
            cpu = await client.enqueue("cpu_in_thread", args=[5.0])  # 2.5 x VT
            cpu_outcome = await cpu.result(timeout=30)
            blocked = await client.enqueue("block_loop_once", args=[6.0])  # 3 x VT
            blocked_outcome = await blocked.result(timeout=30)
            # The blocked worker wakes up after the other one finished the task, and its
            # outcome for attempt 1 is refused.
            await wait_until(lambda: _ended(side, 3), timeout=30, message="the blocked one ended")
        starts = [e.split("|") for e in await side.lrange("exec_start", 0, -1)]
        cpu_runs = [s for s in starts if s[0] == cpu.id]
        blocked_runs = [s for s in starts if s[0] == blocked.id]
        record = await client.get(blocked.id)
        assert record is not None
        check = await check_history(client.redis, [cpu.id, blocked.id], side=side)
        faults.record(
            "A6 heartbeat starvation (CPU in a thread, a blocked loop)",
            check,
            cpu_thread_executions=len(cpu_runs),
            cpu_thread_attempts=cpu_outcome.attempts,
            blocking_executions=len(blocked_runs),
            blocking_final_attempt=blocked_outcome.attempts,
        )
        check.assert_clean(max_dup_exec=1)  # the blocked attempt, run again elsewhere
        assert cpu_outcome.status is TaskStatus.SUCCEEDED
        assert (cpu_outcome.attempts, len(cpu_runs)) == (1, 1)  # never reclaimed
        assert blocked_outcome.status is TaskStatus.SUCCEEDED
        assert blocked_outcome.result == 2  # the second attempt's outcome stands
        assert len(blocked_runs) == 2
        assert {r[2] for r in blocked_runs} == {str(w1.pid), str(w2.pid)}  # run elsewhere
        assert record.status is TaskStatus.SUCCEEDED
        assert record.attempts == 2
    finally:
        await side.aclose()
        await client.aclose()


async def _ended(side: Any, n: int) -> bool:
    return int(await side.llen("exec_end")) >= n
