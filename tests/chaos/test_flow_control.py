"""Queue limits under faults and over time, through real worker processes: a SIGKILLed
worker's concurrency slots free after the visibility timeout and never before, and a rate
holds over ten seconds while hundreds of tasks wait (docs/flow-control.md)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import connect
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.history import check_history, queue_events, settle, unsettled
from dtq_devtools.testing.processes import services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

LIMIT = 3


async def pending(client: Client, queue: str) -> int:
    qk = client.queue_keys(queue)
    counts = [(await client.redis.xpending(s, "workers"))["pending"] for s in qk.streams]
    return sum(counts)


async def slots(client: Client, queue: str, grouped: bool) -> int:
    """Slots in use: the queue's pending entries, or the group's running set."""
    if grouped:
        return int(await client.redis.scard(f"{client.queue_keys(queue).group('tenant')}:r"))
    return await pending(client, queue)


@pytest.mark.parametrize("grouped", [False, True], ids=["queue", "group"])
async def test_a_killed_workers_slots_free_after_the_visibility_timeout_and_never_before(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures, grouped: bool
) -> None:
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(url.replace("/0", "/1"))
    await client.redis.flushall()
    admin = Admin(client)
    await admin.create_queue("limited")
    if grouped:
        await admin.configure("limited", group_concurrency=LIMIT)
    else:
        await admin.configure("limited", concurrency=LIMIT)
    group = "tenant" if grouped else None
    env = {"DTQTEST_SIDE_URL": url.replace("/0", "/1")}
    w1 = worker_process(url, tmp_path / "w1.log", queues="limited", concurrency=8, env=env)
    w2 = worker_process(url, tmp_path / "w2.log", queues="limited", concurrency=8, env=env)
    peak = 0
    try:
        with services(w1):
            handles = await client.enqueue_many(
                [
                    TaskRequest(task="sleep", queue="limited", args=[1.0], group=group)
                    for _ in range(12)
                ]
            )
            ids = [h.id for h in handles if not isinstance(h, Exception)]

            async def full() -> bool:
                return await slots(client, "limited", grouped) == LIMIT

            await wait_until(full, timeout=20, message="every slot taken")
            w2.start()
            w1.signal(signal.SIGKILL)
            killed_at = time.time()

            async def settled_watching() -> bool:
                nonlocal peak
                peak = max(peak, await slots(client, "limited", grouped))
                return await unsettled(client.redis, ids) == 0

            await wait_until(settled_watching, timeout=90, interval=0.02, message="settled")
        check = await check_history(client.redis, ids, side=side)
        events = await queue_events(client.redis, client.queue_keys("limited"))
        started_after = sorted(
            e.ts - killed_at for e in events if e.type == "task.started" and e.ts > killed_at
        )
        faults.record(
            "Flow control: SIGKILL of a worker holding "
            + ("group concurrency slots" if grouped else "concurrency slots"),
            check,
            limit=LIMIT,
            peak_slots=peak,
            first_start_after_kill_s=round(started_after[0], 2) if started_after else None,
        )
        check.assert_clean(max_dup_exec=LIMIT)
        assert check.statuses["succeeded"] == 12
        assert peak <= LIMIT
        # Its slots were taken until the visibility timeout (2 s) reclaimed them.
        assert started_after
        assert started_after[0] >= 1.9
        # No slot leaked, none freed twice: nothing holds one once everything finished.
        assert await slots(client, "limited", grouped) == 0
        assert (await admin.queue("limited")).groups == 0
    finally:
        w2.stop()
        await side.aclose()
        await client.aclose()


async def test_a_rate_of_40_per_second_holds_over_ten_seconds(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    admin = Admin(client)
    await admin.create_queue("rated")
    await admin.configure("rated", rate="40/s")  # the default burst: 4
    workers = [
        worker_process(url, tmp_path / f"w{i}.log", queues="rated", concurrency=50)
        for i in range(3)
    ]
    try:
        handles = await client.enqueue_many(
            [TaskRequest(task="echo", queue="rated", args=[i]) for i in range(400)]
        )
        ids = [h.id for h in handles if not isinstance(h, Exception)]
        with services(*workers):
            await settle(client.redis, ids, timeout=60)
        records = [await client.get(i) for i in ids]
        starts = sorted(r.started_at.timestamp() for r in records if r and r.started_at)
        assert len(starts) == 400
        rate = (len(starts) - 1) / (starts[-1] - starts[0])
        # The busiest second: no window of 1 s holds more than the rate and its burst.
        busiest = max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts)
        faults.record(
            "Flow control: a 40/s rate over 10 s with 400 waiting",
            None,
            measured_per_s=round(rate, 2),
            busiest_second=busiest,
        )
        assert 36 <= rate <= 44, rate
        assert busiest <= 40 + 4, busiest
    finally:
        await client.aclose()
