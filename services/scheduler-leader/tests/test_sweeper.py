"""Stale-worker detection: removal from the registry by Redis time, with a worker.stale event."""

from __future__ import annotations

import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.infra.connection import server_ms
from dtq_core.infra.settings import Settings
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import wait_until

from .conftest import MakeReplica


async def test_a_worker_silent_for_three_visibility_timeouts_is_removed_with_an_event(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    age_ms = 3 * settings.worker.visibility_timeout_s * 1000
    now = await server_ms(redis)
    await redis.zadd(keys.workers, {"w-gone": now - age_ms - 1000, "w-alive": now - 100})
    replica = await make_replica("a", start=False)

    removed = await replica.scheduler.sweeper.sweep()

    assert removed == ["w-gone"]
    assert await redis.zrange(keys.workers, 0, -1) == ["w-alive"]
    events = [fields for _, fields in await redis.xrange(keys.events)]
    assert events == [{"type": "worker.stale", "worker": "w-gone"}]
    metric = replica.scheduler.metrics.registry.get_sample_value("dtq_workers_stale_total")
    assert metric == 1
    assert await replica.scheduler.sweeper.sweep() == []


async def test_the_leader_sweeps_on_its_own(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    now = await server_ms(redis)
    await redis.zadd(keys.workers, {"w-gone": now - 3_600_000})
    await make_replica("a")

    async def announced() -> bool:
        return await redis.xlen(keys.events) > 0

    await wait_until(announced, timeout=5)

    assert await redis.zcard(keys.workers) == 0
    ((_, fields),) = await redis.xrange(keys.events)
    assert fields["worker"] == "w-gone"


async def test_the_reconcile_pass_drops_consumers_that_hold_nothing(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    """Consumers of workers that are gone (killed, never stopped cleanly) are deleted once
    idle; a consumer that still holds an entry is kept, with its entry."""
    client = Client(redis, settings)
    await client.enqueue("t", queue="prune")
    qk = client.queue_keys("prune")
    _, claimed = await client.scripts.claim(
        qk, consumer="holder", count=1, events_maxlen=1000, retention_ms=60_000
    )
    assert len(claimed) == 1
    await redis.xgroup_createconsumer(qk.streams[5], "workers", "gone-1")
    await redis.xgroup_createconsumer(qk.streams[5], "workers", "gone-2")
    replica = await make_replica("a", start=False)
    reconciler = replica.scheduler.reconciler
    assert reconciler.consumer_idle_ms == 3 * settings.worker.visibility_timeout_s * 1000

    await reconciler.step()  # not idle long enough yet
    assert {c["name"] for c in await redis.xinfo_consumers(qk.streams[5], "workers")} == {
        "holder",
        "gone-1",
        "gone-2",
    }
    reconciler.consumer_idle_ms = 0
    await reconciler.step()
    consumers = await redis.xinfo_consumers(qk.streams[5], "workers")
    assert [(c["name"], c["pending"]) for c in consumers] == [("holder", 1)]
