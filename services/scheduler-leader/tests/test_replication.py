"""The leader with ``DTQ_REDIS_WAIT_REPLICAS=1`` on a real master and replica: it takes the
lease and promotes due tasks, each confirmed by the replica; while the replica stalls
(SIGSTOP) nothing it does is acknowledged, and afterwards it promotes each task once."""

from __future__ import annotations

from dtq_core.client import Client
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import load_settings
from dtq_core.messages import TaskStatus
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.plugin import FAST
from dtq_devtools.testing.topologies import ReplicaSet

from .conftest import MakeReplica
from .test_promoter import queued_at_least, stream_counts


async def test_the_leader_promotes_through_a_stalled_replica_once(
    make_replica: MakeReplica, replica_set: ReplicaSet
) -> None:
    overrides = {
        "redis_url": replica_set.url,
        "redis_wait_replicas": 1,
        "redis_wait_timeout_ms": 600,
    }
    settings = load_settings({}, **FAST, **overrides)
    async with Client(connect(settings), settings, owns_redis=True) as client:
        await client.redis.flushall()
        replica_set.wait_synced()
        leader = await make_replica("a", **overrides)
        await wait_until(lambda: leader.is_leader, message="the lease taken and confirmed")
        early = await client.enqueue("t.later", queue="mail", delay_s=0.1)
        await wait_until(lambda: queued_at_least(client, [early.id], 1), message="promoted")
        later = await client.enqueue("t.later", queue="mail", delay_s=0.3)
        with replica_set.replicas[0].frozen():
            await wait_until(
                lambda: leader.scheduler.metrics.registry.get_sample_value(
                    "dtq_scheduler_redis_errors_total", {"duty": "lease"}
                ),
                message="a renewal not confirmed",
            )
        replica_set.wait_synced()
        await wait_until(lambda: queued_at_least(client, [later.id], 1), timeout=15)
        counts = await stream_counts(client.redis, settings, "mail")
        assert set(counts.values()) == {1}  # each promoted once
        assert (await later.status()) is TaskStatus.QUEUED
