"""``dtq-worker --processes 2`` across real processes: one worker of two processes in the
registry, one ``/metrics`` adding both up, one ``/health`` that a wedged process fails; a
process killed with -9 is restarted and its tasks reclaimed and finished once; SIGTERM drains
every process; a supervisor killed with -9 leaves no process running unsupervised.

Each test checks the whole history (``dtq_devtools.testing.history``) and records its figures in
``.artifacts/faults.jsonl``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from dtq_core import Client, TaskRequest, TaskStatus
from dtq_core.infra.connection import connect
from dtq_core.ops.admin import Admin, WorkerInfo
from dtq_devtools.testing import RedisServer, free_port, wait_until
from dtq_devtools.testing.history import check_history, queue_events, settle
from dtq_devtools.testing.processes import ServiceProcess, services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow


def supervisor(url: str, log: Path, **env: str) -> ServiceProcess:
    return worker_process(
        url,
        log,
        concurrency=4,
        env={
            "DTQ_WORKER_PROCESSES": "2",
            "DTQ_WORKER_METRICS_PORT": str(free_port()),
            "DTQTEST_SIDE_URL": url.replace("/0", "/1"),
            **env,
        },
    )


def started(proc: ServiceProcess) -> dict[int, int]:
    """Slot -> pid of the latest process the supervisor started in it (its log)."""
    out: dict[int, int] = {}
    for line in proc.log().splitlines():
        if '"worker_process_started"' in line:
            entry = json.loads(line)
            out[entry["slot"]] = entry["pid"]
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose (the supervisor has not reaped it yet).
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def health(proc: ServiceProcess) -> tuple[int, dict[str, Any]]:
    port = proc.metrics_port()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def one_worker(client: Client) -> WorkerInfo:
    workers = await Admin(client).workers()
    assert len(workers) == 1, [w.id for w in workers]
    return workers[0]


async def both_running(client: Client) -> bool:
    workers = await Admin(client).workers()
    return len(workers) == 1 and sum(1 for p in workers[0].processes if p.state == "running") == 2


async def test_two_processes_drain_a_queue_as_one_worker_with_one_metrics_endpoint(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    w = supervisor(url, tmp_path / "w.log")
    try:
        with services(w):
            await wait_until(lambda: both_running(client), timeout=60, message="2 processes")
            worker = await one_worker(client)
            assert worker.process_slots == 2
            assert worker.pid == w.pid  # the supervisor's
            assert worker.concurrency == 8  # 2 processes x 4
            assert [p.id for p in worker.processes] == [f"{worker.id}/0", f"{worker.id}/1"]
            assert {p.pid for p in worker.processes} == set(started(w).values())
            code, body = health(w)
            assert code == 200
            assert sorted(body["processes"]) == ["0", "1"]

            t0 = time.time()
            handles = await client.enqueue_many(
                [TaskRequest(task="sleep", args=[0.05]) for _ in range(200)]
            )
            ids = [h.id for h in handles if not isinstance(h, Exception)]
            settle_s = await settle(client.redis, ids, timeout=120)
            check = await check_history(client.redis, ids, side=side)
            events = await queue_events(client.redis, client.queue_keys("default"))
            by_process = {e.worker for e in events if e.type == "task.started"}
            assert by_process == {p.id for p in worker.processes}  # both took tasks
            # One endpoint: the supervisor adds up both processes' counters.
            await wait_until(
                lambda: _metric_at_least(w, "dtq_tasks_total", 200, status="succeeded"),
                timeout=10,
            )
            assert w.metric("dtq_tasks_total", status="succeeded") == 200
            assert w.metric("dtq_worker_processes") == 2
            assert w.metric("dtq_worker_concurrency") == 8
            assert w.metric("dtq_task_duration_seconds_count") == 200

            # A wedged process (stopped) fails the worker's /health; it passes again after.
            victim = started(w)[1]
            os.kill(victim, signal.SIGSTOP)
            try:
                code, body = health(w)
                assert code == 503
                assert body["failed"] == ["process 1"]
                assert body["processes"]["1"]["state"] == "not answering"
                assert body["processes"]["0"]["ok"] is True
            finally:
                os.kill(victim, signal.SIGCONT)
            await wait_until(lambda: health(w)[0] == 200, timeout=10, message="healthy again")
        faults.record(
            "--processes 2: one worker, one metrics endpoint",
            check,
            tasks=len(ids),
            settle_s=round(settle_s, 2),
            drain_per_s=round(len(ids) / max(0.001, time.time() - t0), 1),
        )
        check.assert_clean()
        assert check.statuses["succeeded"] == 200
    finally:
        await side.aclose()
        await client.aclose()


async def _metric_at_least(proc: ServiceProcess, name: str, value: float, **labels: str) -> bool:
    return await asyncio.to_thread(proc.metric, name, **labels) >= value


async def test_a_process_killed_mid_task_is_restarted_and_its_tasks_finish_once(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    w = supervisor(url, tmp_path / "w.log")
    try:
        with services(w):
            await wait_until(lambda: both_running(client), timeout=60, message="2 processes")
            handles = await client.enqueue_many(
                [TaskRequest(task="sleep", args=[1.0]) for _ in range(40)]
            )
            ids = [h.id for h in handles if not isinstance(h, Exception)]
            await wait_until(lambda: _running(client, ids, 8), timeout=30, message="8 running")
            victim = started(w)[0]
            inflight = await _running_count(client, ids)
            killed_at = time.time()
            os.kill(victim, signal.SIGKILL)
            await wait_until(
                lambda: started(w)[0] != victim, timeout=30, message="slot 0 restarted"
            )
            settled_s = await settle(client.redis, ids, timeout=90)
            worker = await one_worker(client)
            restarted = [p for p in worker.processes if p.restarts == 1]
            assert [p.id for p in restarted] == [f"{worker.id}/0.1"]
            assert restarted[0].state == "running"
            restarts = w.metric("dtq_worker_process_restarts_total", slot="0")
            code, _ = health(w)
        check = await check_history(client.redis, ids, side=side)
        events = await queue_events(client.redis, client.queue_keys("default"))
        requeued = [e for e in events if e.type == "task.requeued" and e.reason == "lease_expired"]
        delays = sorted(e.ts - killed_at for e in requeued)
        faults.record(
            "--processes 2: kill -9 of one worker process mid-task",
            check,
            inflight_at_kill=inflight,
            redelivered=len(requeued),
            redelivery_delay_s_min=round(delays[0], 2) if delays else None,
            settle_s=round(settled_s, 2),
        )
        check.assert_clean(max_dup_exec=inflight)
        assert check.statuses["succeeded"] == 40
        assert 1 <= len(requeued) <= inflight
        assert delays[0] >= 1.9  # reclaimed after the visibility timeout (2 s), as a lone worker's
        assert restarts == 1
        assert code == 200
    finally:
        await side.aclose()
        await client.aclose()


async def _running_count(client: Client, ids: list[str]) -> int:
    n = 0
    for task_id in ids:
        record = await client.get(task_id)
        if record is not None and record.status is TaskStatus.RUNNING:
            n += 1
    return n


async def _running(client: Client, ids: list[str], n: int) -> bool:
    return await _running_count(client, ids) >= n


async def test_sigterm_drains_every_process_and_exits_0(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    # No prefetch: the 8 tasks are all running, none waits in a process's buffer.
    w = supervisor(url, tmp_path / "w.log", DTQ_DRAIN_TIMEOUT_S="10", DTQ_WORKER_PREFETCH="0")
    try:
        with services(w):
            await wait_until(lambda: both_running(client), timeout=60, message="2 processes")
            children = started(w)
            handles = await client.enqueue_many(
                [TaskRequest(task="sleep", args=[1.5]) for _ in range(8)]
            )
            ids = [h.id for h in handles if not isinstance(h, Exception)]
            await wait_until(lambda: _running(client, ids, 8), timeout=30, message="8 running")
            t_term = time.time()
            w.signal(signal.SIGTERM)
            code = await asyncio.to_thread(w.wait, 30)
            exit_s = time.time() - t_term
            assert not any(alive(pid) for pid in children.values())
            await settle(client.redis, ids, timeout=10)
        check = await check_history(client.redis, ids, side=side)
        faults.record(
            "--processes 2: SIGTERM drains both processes",
            check,
            exit_code=code,
            exit_s=round(exit_s, 2),
        )
        check.assert_clean()
        assert code == 0
        # Every running task finished where it ran, within the drain budget.
        assert check.statuses["succeeded"] == 8
        for task_id in ids:
            record = await client.get(task_id)
            assert record is not None
            assert record.attempts == 1
        assert await Admin(client).workers() == []  # each process left the registry
    finally:
        await side.aclose()
        await client.aclose()


async def test_a_supervisor_killed_with_9_leaves_no_process_behind(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    w = supervisor(url, tmp_path / "w.log", DTQ_DRAIN_TIMEOUT_S="10", DTQ_WORKER_PREFETCH="0")
    try:
        with services(w):
            await wait_until(lambda: both_running(client), timeout=60, message="2 processes")
            children = started(w)
            handles = await client.enqueue_many(
                [TaskRequest(task="sleep", args=[1.5]) for _ in range(8)]
            )
            ids = [h.id for h in handles if not isinstance(h, Exception)]
            await wait_until(lambda: _running(client, ids, 8), timeout=30, message="8 running")
            t_kill = time.time()
            w.signal(signal.SIGKILL)
            await wait_until(
                lambda: _none_alive(list(children.values())), timeout=30, message="processes gone"
            )
            gone_s = time.time() - t_kill
            await settle(client.redis, ids, timeout=10)
        check = await check_history(client.redis, ids, side=side)
        faults.record(
            "--processes 2: kill -9 of the supervisor",
            check,
            processes_gone_s=round(gone_s, 2),
        )
        check.assert_clean()
        assert check.statuses["succeeded"] == 8  # they drained: what ran finished
        assert "worker_supervisor_gone" in w.log()
    finally:
        await side.aclose()
        await client.aclose()


async def _none_alive(pids: list[int]) -> bool:
    return not any(alive(pid) for pid in pids)
