"""A2: the ack window, between a handler's side effect and the finish that records it.

- A worker dies after the side effect and before its finish: the attempt is reclaimed after
  the visibility timeout and run again (at-least-once, as documented), the side effect
  happens once more per crash, and the task ends succeeded once.
- A finish reaches Redis but its reply is lost (a proxy drops the connection as the reply
  comes back): the worker sends it again and is told the status it recorded. It never counts
  its own success as a stale finish, and the handler is not run again.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dtq_core import Client, TaskStatus
from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, free_port, wait_until
from dtq_devtools.testing.history import check_history, queue_events, settle
from dtq_devtools.testing.processes import ServiceProcess, services, worker_process
from dtq_devtools.testing.proxy import FaultProxy
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

TASKS = 3


async def test_a_crash_after_the_side_effect_runs_it_again_and_finishes_once(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    side_url = url.replace("/0", "/1")
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(side_url)
    await client.redis.flushall()
    # One task at a time per worker, none prefetched: each death is one attempt's crash.
    env = {"DTQTEST_SIDE_URL": side_url, "DTQ_WORKER_PREFETCH": "0"}
    handles = [await client.enqueue("effect_then_crash") for _ in range(TASKS)]
    ids = [h.id for h in handles]
    workers: list[ServiceProcess] = []
    deaths = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if await _all_terminal(client, ids):
                break
            for slot in range(2):  # two workers, each restarted when its handler killed it
                current = workers[slot] if slot < len(workers) else None
                if current is None or not current.alive():
                    if current is not None:
                        deaths += 1
                    w = worker_process(
                        url, tmp_path / f"w{len(workers)}.log", concurrency=1, env=env
                    )
                    if current is None:
                        workers.append(w.start())
                    else:
                        workers[slot] = w.start()
            await asyncio.sleep(0.05)
        settle_s = await settle(client.redis, ids, timeout=10)
        for w in workers:
            w.stop()
        check = await check_history(client.redis, ids, side=side)
        effects = [e.split("|") for e in await side.lrange("effect", 0, -1)]
        per_task = {t: sum(1 for e in effects if e[0] == t) for t in ids}
        events = await queue_events(client.redis, client.queue_keys("default"))
        reclaimed = [e for e in events if e.type == "task.requeued" and e.reason == "lease_expired"]
        records = [await client.get(t) for t in ids]
        faults.record(
            "A2 crash after the side effect, before finish",
            check,
            crashes=deaths,
            side_effects=len(effects),
            reclaimed=len(reclaimed),
            settle_s=round(settle_s, 2),
        )
        check.assert_clean(max_dup_exec=deaths)
        assert deaths == TASKS  # each task's first attempt crashed its worker, once
        assert check.dup_exec == deaths  # run again once per crash, never more
        assert all(n == 2 for n in per_task.values()), per_task  # the effect, once per run
        assert len(reclaimed) == TASKS
        for record in records:
            assert record is not None
            assert (record.status, record.attempts, record.result) == (TaskStatus.SUCCEEDED, 2, 2)
            assert [e.reason for e in record.errors] == ["lease_expired"]
    finally:
        for w in workers:
            w.stop()
        await side.aclose()
        await client.aclose()


async def _all_terminal(client: Client, ids: list[str]) -> bool:
    for task_id in ids:
        record = await client.get(task_id)
        if record is None or not record.status.terminal:
            return False
    return True


async def test_a_finish_whose_reply_is_lost_is_not_stale(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    side_url = url.replace("/0", "/1")  # reached directly, not through the proxy
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(side_url)
    await client.redis.flushall()
    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    worker = worker_process(
        proxy.url,
        tmp_path / "w.log",
        concurrency=2,
        env={"DTQTEST_SIDE_URL": side_url, "DTQ_WORKER_METRICS_PORT": str(free_port())},
    )
    try:
        with services(worker):
            await wait_until(worker.metrics_port, timeout=20, message="the worker's metrics")
            # The worker's next finish runs in Redis; its reply never comes back.
            proxy.lose_reply_to(b"_finish\r\n")
            handle = await client.enqueue("echo", args=["once"])
            outcome = await handle.result(timeout=30)
            await wait_until(lambda: proxy.replies_lost == 1, timeout=10, message="reply lost")

            def answered() -> float:
                return worker.metric("dtq_tasks_total") or 0.0

            # The retried finish is answered: the worker counts the task once, by status.
            await wait_until(lambda: asyncio.to_thread(answered), timeout=20, message="counted")
            counted = {
                "succeeded": worker.metric("dtq_tasks_total", status="succeeded"),
                "stale": worker.metric("dtq_tasks_total", status="stale"),
                "dtq_stale_finish_total": worker.metric("dtq_stale_finish_total"),
                "dtq_lease_lost_total": worker.metric("dtq_lease_lost_total"),
                "finish_errors": worker.metric("dtq_worker_redis_errors_total", loop="finish"),
            }
            assert worker.alive()
        check = await check_history(client.redis, [handle.id], side=side)
        events = await queue_events(client.redis, client.queue_keys("default"))
        terminal = [e for e in events if e.type == "task.succeeded"]
        faults.record(
            "A2 finish whose reply is lost, sent again",
            check,
            replies_lost=proxy.replies_lost,
            connections=proxy.connections,
            **counted,
        )
        check.assert_clean(max_dup_exec=0)  # the finish was sent again, not the handler run
        assert outcome.status is TaskStatus.SUCCEEDED
        assert outcome.result == {"args": ["once"], "kwargs": {}, "attempt": 1}
        assert len(terminal) == 1
        assert counted["finish_errors"] >= 1  # the lost reply was seen, and the finish retried
        assert counted["dtq_stale_finish_total"] == 0
        assert counted["stale"] == 0
        assert counted["succeeded"] == 1
        assert counted["dtq_lease_lost_total"] == 0
    finally:
        await proxy.stop()
        await side.aclose()
        await client.aclose()
