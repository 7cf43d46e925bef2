"""The master of a worker's queue fails while its handlers run (Sentinel and Redis Cluster).

Eight handlers sleep for 4 s; once all of them run and their claims reached the replica
(``WAIT``), the master is killed (kill -9) and its replica promoted. The claims survived, so
each lease must survive too: the worker keeps extending it on the promoted replica and its
finish lands there under the same lease token. The visibility timeout (10 s here) outlasts
the failover, so no lease lapses while the worker cannot reach Redis; should one lapse anyway,
the task may be reclaimed once, never finished twice. The history checker counts lost,
duplicate-terminal and stuck tasks; the side effects count executions.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import connect
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.failover import service_stack, settled_history, topology
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

TASKS = 8
HANDLER_S = 4.0
QUEUE = "leases"
KNOBS = {"DTQ_VISIBILITY_TIMEOUT_S": "10", "DTQ_HEARTBEAT_INTERVAL_S": "0.5"}
"""A lease outlasts the failover (detection, election, reconnection: a few seconds), while
the heartbeat extends it twice a second."""


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
async def test_a_master_failing_under_running_handlers_keeps_their_leases(
    kind: str, tmp_path: Path, faults: FaultFigures
) -> None:
    side = RedisServer(tmp_path / "side")
    side.start()
    side_redis = connect(side.url)
    try:
        with (
            topology(kind, tmp_path / "redis") as redis_set,
            service_stack(
                redis_set.url,
                tmp_path,
                queues=QUEUE,
                side_url=side.url,
                workers=1,
                concurrency=TASKS,
                env=KNOBS,
            ) as stack,
        ):
            await stack.ready()
            pids = stack.pids()
            client = Client.from_url(redis_set.url, max_queue_depth=0)
            try:
                handles = await client.enqueue_many(
                    [TaskRequest(task="sleep", args=[HANDLER_S], queue=QUEUE)] * TASKS
                )
                ids = [h.id for h in handles if not isinstance(h, Exception)]
                assert len(ids) == TASKS

                async def all_started() -> bool:
                    return int(await side_redis.llen("exec_start")) == TASKS

                await wait_until(
                    all_started,
                    timeout=30,
                    message="every handler started",
                )
                meta = Keys().queue(QUEUE).meta
                assert redis_set.replicated(meta), "the claims did not reach the replica"
                victim = redis_set.master_of(meta)
                victim.kill()
                killed_at = time.monotonic()
                check = await settled_history(redis_set.url, side.url, ids)
                settled_s = time.monotonic() - killed_at
                promoted = redis_set.master_of(meta)
            finally:
                await client.aclose()
            restarted = stack.restarted(pids)
        kept = sum(1 for n in check.executions.values() if n == 1)
        faults.record(
            f"{kind}: the master fails while handlers run",
            check,
            leases_kept=kept,
            reclaimed=TASKS - kept,
            settle_s=round(settled_s, 2),
            restarted=restarted,
        )
        assert promoted is not victim
        check.assert_clean(max_dup_exec=TASKS)
        assert check.statuses["succeeded"] == TASKS
        assert all(n <= 2 for n in check.executions.values()), check.executions
        assert not restarted
    finally:
        await side_redis.aclose()
        side.stop()
