"""A9: the kernel's OOM killer ends a worker mid-task.

The worker runs in a memory cgroup of the test's own; a handler allocates past the limit and
the kernel SIGKILLs the process with its other tasks in flight. A peer reclaims them after the
visibility timeout: each ends in exactly one terminal state, the allocating one at attempt 2
(it runs within its budget on a worker without the limit), nothing is lost.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.cgroups import memory_limit
from dtq_devtools.testing.history import check_history, settle
from dtq_devtools.testing.processes import services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

LIMIT_MB = 64
ALLOCATE_MB = 256
SLEEPERS = 3


async def test_a_worker_killed_by_the_oom_killer_loses_nothing(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    side_url = server.url.replace("/0", "/1")
    side = connect(side_url)
    env = {"DTQTEST_SIDE_URL": side_url}
    victim = worker_process(server.url, tmp_path / "victim.log", concurrency=4, env=env)
    peer = worker_process(server.url, tmp_path / "peer.log", concurrency=4, env=env)
    try:
        with memory_limit(LIMIT_MB << 20) as cgroup, services(victim):
            cgroup.add(victim.pid)
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)
            sleepers = await client.enqueue_many(
                [TaskRequest(task="sleep", args=[5.0]) for _ in range(SLEEPERS)]
            )
            ids = [h.id for h in sleepers if not isinstance(h, Exception)]
            await wait_until(lambda: _started(side, SLEEPERS), timeout=30, message="running")
            hog = await client.enqueue("allocate", args=[ALLOCATE_MB])
            ids.append(hog.id)
            code = await asyncio.to_thread(victim.wait, 60)
            killed_at = time.monotonic()
            oom_kills = cgroup.oom_kills()
        with services(peer):
            settle_s = await settle(client.redis, ids, timeout=90)
        record = await client.get(hog.id)
        check = await check_history(client.redis, ids, side=side)
        faults.record(
            "A9 worker killed by the OOM killer mid-task",
            check,
            cgroup_version=cgroup.version,
            limit_mb=LIMIT_MB,
            exit_code=code,
            oom_kills=oom_kills,
            inflight_at_kill=SLEEPERS + 1,
            hog_attempt=record.attempts if record else None,
            recovered_s=round(time.monotonic() - killed_at, 2),
            settle_s=round(settle_s, 2),
        )
        assert code == -signal.SIGKILL, "the worker was not killed by the kernel"
        check.assert_clean(max_dup_exec=SLEEPERS + 1)
        assert check.statuses["succeeded"] == SLEEPERS + 1
        assert record is not None
        assert record.attempts == 2
        assert [e.reason for e in record.errors] == ["lease_expired"]
    finally:
        peer.stop()
        victim.stop()
        await side.aclose()
        await client.aclose()
        server.stop()


async def _started(side: aioredis.Redis, n: int) -> bool:
    return int(await side.llen("exec_start")) >= n
