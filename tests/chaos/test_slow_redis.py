"""B10: a slow link to Redis. A proxy in the test process delays every chunk each way; the
worker talks to Redis only through it. With a round trip well under the visibility timeout
minus the heartbeat interval, long tasks are not reclaimed by mistake: each runs once, at
attempt 1, and the worker's lease extensions keep up."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer
from dtq_devtools.testing.history import check_history, queue_events, settle
from dtq_devtools.testing.processes import services, worker_process
from dtq_devtools.testing.proxy import FaultProxy
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("one_way_ms", [50, 200])
async def test_a_slow_link_causes_no_spurious_reclaim(
    redis_server: RedisServer, tmp_path: Path, one_way_ms: int, faults: FaultFigures
) -> None:
    client = Client.from_url(redis_server.url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    side_url = redis_server.url.replace("/0", "/1")  # reached directly, not through the proxy
    side = connect(side_url)
    proxy = FaultProxy(redis_server.port, delay_s=one_way_ms / 1000)
    await proxy.start()
    # VT 2 s, heartbeat 0.5 s (FAST_ENV); each task runs 1.5 visibility timeouts.
    worker = worker_process(
        proxy.url,
        tmp_path / "w.log",
        concurrency=8,
        env={"DTQTEST_SIDE_URL": side_url},
    )
    try:
        with services(worker):
            handles = [await client.enqueue("sleep", args=[3.0]) for _ in range(16)]
            ids = [h.id for h in handles]

            settle_s = await settle(client.redis, ids, timeout=90, interval=0.5)
        check = await check_history(client.redis, ids, side=side)
        events = await queue_events(client.redis, client.queue_keys("default"))
        reclaimed = [e for e in events if e.type == "task.requeued"]
        attempts = [(await client.get(t)).attempts for t in ids]  # type: ignore[union-attr]
        faults.record(
            f"B10 slow Redis link ({one_way_ms} ms each way)",
            check,
            one_way_ms=one_way_ms,
            reclaimed=len(reclaimed),
            max_attempt=max(attempts),
            settle_s=round(settle_s, 2),
        )
        check.assert_clean(max_dup_exec=0)
        assert reclaimed == []
        assert max(attempts) == 1
    finally:
        await proxy.stop()
        await side.aclose()
        await client.aclose()
