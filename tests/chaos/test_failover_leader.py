"""Scheduler leadership across a Redis failover (Sentinel and Redis Cluster).

Two schedulers run; a producer submits delayed tasks the leader promotes; the master that
holds the leader lock is killed (kill -9) and its replica promoted. Afterwards exactly one
scheduler leads, every leadership taken (``leader_acquired`` in either log) has a larger epoch
than the one before it, the lock names the latest, no queue has seen an epoch beyond it (so
no promotion of the new leader is refused), and every delayed task was promoted and ran: the
history checker finds nothing stuck or doubled (services/scheduler-leader leader.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.infra.connection import connect
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.failover import (
    Producer,
    Stack,
    sdk_submit,
    service_stack,
    settled_history,
    topology,
)
from tests.chaos.conftest import FaultFigures
from tests.chaos.test_failover import REPLICATION_WINDOW_S
from tests.chaos.test_scheduler_failover import holder_pid

pytestmark = pytest.mark.slow

QUEUE = "leading"
LOAD_BEFORE = 40
LOAD_AFTER = 40
DELAY_S = 0.3


def leaderships(stack: Stack) -> list[tuple[str, int, int]]:
    """``(timestamp, epoch, pid)`` of every ``leader_acquired`` line of the schedulers, in
    time order."""
    out = []
    for proc in stack.schedulers:
        for line in proc.log().splitlines():
            if '"leader_acquired"' in line:
                entry = json.loads(line)
                out.append((str(entry["timestamp"]), int(entry["epoch"]), proc.pid))
    return sorted(out)


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
async def test_one_leader_with_growing_epochs_after_a_failover(
    kind: str, tmp_path: Path, faults: FaultFigures
) -> None:
    keys = Keys()
    side = RedisServer(tmp_path / "side")
    side.start()
    try:
        with (
            topology(kind, tmp_path / "redis") as redis_set,
            service_stack(
                redis_set.url,
                tmp_path,
                queues=QUEUE,
                side_url=side.url,
                workers=1,
                schedulers=2,
                env={"DTQ_LOG_LEVEL": "DEBUG"},
            ) as stack,
        ):
            await stack.ready()
            pids = stack.pids()
            client = Client.from_url(redis_set.url, max_queue_depth=0)
            producer = Producer("delayed", sdk_submit(client, "echo", QUEUE, delay_s=DELAY_S))
            try:
                producer.start()
                started = time.monotonic()
                await wait_until(
                    lambda: (
                        producer.submits.acked_between(started, time.monotonic()) >= LOAD_BEFORE
                    ),
                    timeout=60,
                )
                before = leaderships(stack)
                victim = redis_set.master_of(keys.leader)
                victim.kill()
                killed_at = time.monotonic()
                gap = await producer.first_ack_after(killed_at, 30)
                await wait_until(
                    lambda: (
                        producer.submits.acked_between(killed_at, time.monotonic()) >= LOAD_AFTER
                    ),
                    timeout=60,
                )
            finally:
                submits = await producer.stop()
                await client.aclose()
            check = await settled_history(redis_set.url, side.url, submits.ids)
            redis = connect(redis_set.url)
            try:
                token = await wait_until(lambda: redis.get(keys.leader), timeout=15)
                seen = await redis.hget(keys.queue(QUEUE).meta, "epoch")
            finally:
                await redis.aclose()
            after = leaderships(stack)
            restarted = stack.restarted(pids)
            scheduler_pids = {p.pid for p in stack.schedulers}
        lost_ages = [round(killed_at - at, 3) for at in submits.acked_at(check.lost)]
        faults.record(
            f"{kind}: scheduler leadership across a failover",
            check,
            leaderships=[(epoch, pid) for _, epoch, pid in after],
            took_over=len(after) - len(before),
            lock_epoch=int(token.partition(":")[0]),
            queue_epoch=int(seen or 0),
            gap_s=None if gap is None else round(gap, 3),
            lost_acked_before_kill_s=lost_ages,
            restarted=restarted,
        )
        epochs = [epoch for _, epoch, _ in after]
        assert before, "no scheduler led before the kill"
        assert epochs == sorted(set(epochs)), f"epochs did not only grow: {after}"
        assert holder_pid(token) in scheduler_pids
        assert int(token.partition(":")[0]) == epochs[-1]
        assert int(seen or 0) <= epochs[-1]
        assert not restarted
        assert all(0 <= age <= REPLICATION_WINDOW_S for age in lost_ages), lost_ages
        problems = [p for p in check.problems() if not p.startswith(f"{len(check.lost)} lost")]
        assert not problems, problems
    finally:
        side.stop()
