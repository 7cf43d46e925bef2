"""A queue's slot migrated to another master while tasks flow (Redis Cluster resharding).

SDK and REST producers submit into one queue and two workers drain it while its slot moves,
key by key, from its master to another one (``CLUSTER SETSLOT ... IMPORTING/MIGRATING``,
``MIGRATE`` in batches of 10 keys, then ``SETSLOT ... NODE``), as ``redis-cli --cluster
reshard`` does. Meanwhile clients meet ``ASK`` (a key already moved), ``TRYAGAIN`` (a function
whose keys are split between the two nodes) and, at the end, ``MOVED``; they follow or retry,
and nothing is lost, doubled or stuck: the history checker must be clean.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.failover import service_stack, settled_history
from dtq_devtools.testing.topologies import RedisClusterSet
from tests.chaos.conftest import FaultFigures
from tests.chaos.test_failover import acked_after, producing

pytestmark = pytest.mark.slow

QUEUE = "moving"
BATCH = 10
PACE_S = 0.05
"""Between two batches: the migration then spans a couple of seconds of traffic (pacing the
fault, not waiting for a fact), so clients meet the slot half moved."""


def migrate_slot(cluster: RedisClusterSet, key: str) -> tuple[int, int]:
    """Move the slot of ``key`` to another master, a batch of keys at a time; returns the
    slot and how many keys moved."""
    source = cluster.master_of(key)
    target = next(n for n in cluster.primaries() if n is not source)
    with cluster.client(source) as src, cluster.client(target) as dst:
        slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
        src_id = src.execute_command("CLUSTER", "MYID")
        dst_id = dst.execute_command("CLUSTER", "MYID")
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        moved = 0
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, BATCH):
            src.execute_command(
                "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "REPLACE", "KEYS", *keys
            )
            moved += len(keys)
            time.sleep(PACE_S)
        for node in cluster.primaries():
            with cluster.client(node) as c:
                c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    return slot, moved


async def test_a_slot_migrated_while_tasks_flow_loses_and_doubles_nothing(
    tmp_path: Path, faults: FaultFigures
) -> None:
    side = RedisServer(tmp_path / "side")
    side.start()
    cluster = RedisClusterSet(tmp_path / "redis", node_timeout_ms=2000)
    cluster.start()
    meta = Keys().queue(QUEUE).meta
    try:
        with service_stack(cluster.url, tmp_path, queues=QUEUE, side_url=side.url) as stack:
            await stack.ready()
            pids = stack.pids()
            client = Client.from_url(cluster.url, max_queue_depth=0)
            try:
                async with producing(client, stack, [QUEUE]) as producers:
                    started = time.monotonic()
                    await wait_until(lambda: acked_after(producers, started, 60), timeout=60)
                    source = cluster.master_of(meta)
                    migrating_at = time.monotonic()
                    slot, moved = await asyncio.to_thread(migrate_slot, cluster, meta)
                    migrated_at = time.monotonic()
                    await wait_until(lambda: acked_after(producers, migrated_at, 60), timeout=60)
                submits = [p.submits for p in producers]
                check = await settled_history(
                    cluster.url, side.url, [i for s in submits for i in s.ids]
                )
            finally:
                await client.aclose()
            restarted = stack.restarted(pids)
        target = cluster.master_of(meta)
        faults.record(
            "Cluster: a queue's slot migrated while tasks flow",
            check,
            slot=slot,
            keys_moved=moved,
            migrate_s=round(migrated_at - migrating_at, 2),
            refused=sum(s.refused for s in submits),
            restarted=restarted,
        )
        assert target is not source
        assert moved > 0
        check.assert_clean()
        assert not restarted
    finally:
        cluster.stop()
        side.stop()
