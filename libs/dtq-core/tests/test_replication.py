"""``DTQ_REDIS_WAIT_REPLICAS``: a transition is acknowledged only once replicas confirmed it,
on a real master with a real replica (stopped with SIGSTOP to make it stop confirming).

A ``WAIT`` sent on any other connection than the write's would confirm at once even with the
replica stopped (that connection wrote nothing), so the tests of a stopped replica fail unless
the ``WAIT`` travels behind the write.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.errors import NotReplicatedError
from dtq_core.infra.connection import connect
from dtq_core.infra.replication import ReplicaWait, replica_wait
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import TaskRequest
from dtq_core.ops.admin import Admin
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.scripts import Finish
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.plugin import FAST
from dtq_devtools.testing.topologies import ReplicaSet
from dtq_devtools.testing.transitions import Harness, held

TIMEOUT_MS = 1500
"""Long enough for a replica starved of CPU by other tests to confirm (each stalled-replica
test waits it out once); within a third of the leader TTL these settings give."""


@pytest.fixture
def wait_settings(replica_set: ReplicaSet) -> Settings:
    return load_settings(
        {},
        redis_url=replica_set.url,
        redis_wait_replicas=1,
        redis_wait_timeout_ms=TIMEOUT_MS,
        **{**FAST, "leader_ttl_s": 10.0},
    )


@pytest.fixture
async def master(wait_settings: Settings, replica_set: ReplicaSet) -> AsyncIterator[aioredis.Redis]:
    redis = connect(wait_settings)
    await redis.flushall()
    replica_set.wait_synced()
    yield redis
    await redis.aclose()


@pytest.fixture
async def wait_client(master: aioredis.Redis, wait_settings: Settings) -> AsyncIterator[Client]:
    client = Client(master, wait_settings)
    yield client
    await client.aclose()


async def on_replica(replica_set: ReplicaSet, key: str) -> bool:
    replica = aioredis.Redis(port=replica_set.replicas[0].port, decode_responses=True)
    try:
        return bool(await replica.exists(key))
    finally:
        await replica.aclose()


def test_the_policy_comes_from_the_settings_only(wait_settings: Settings) -> None:
    assert replica_wait(connect(wait_settings)) == ReplicaWait(1, TIMEOUT_MS)
    assert replica_wait(connect(wait_settings.redis.url)) == ReplicaWait(0, 500)
    assert replica_wait(connect(load_settings({}, redis_url=wait_settings.redis.url))).replicas == 0


async def test_an_acknowledged_submit_is_on_the_replica(
    wait_client: Client, replica_set: ReplicaSet
) -> None:
    handle = await wait_client.enqueue("t.x", queue="emails")
    qk, rand = wait_client.reader.locate(handle.id)
    assert await on_replica(replica_set, qk.task(rand))  # no wait: it was there at the ack


async def test_a_stalled_replica_fails_the_submit_and_the_retry_makes_one_task(
    wait_client: Client, replica_set: ReplicaSet
) -> None:
    await wait_client.enqueue("t.x", queue="emails", priority=1)  # the queue is registered
    replica = replica_set.replicas[0]
    with replica.frozen():
        started = time.monotonic()
        with pytest.raises(NotReplicatedError) as caught:
            await wait_client.enqueue("t.x", queue="emails", idempotency_key="order-7")
        took = time.monotonic() - started
    assert f"written on the master, confirmed by 0 of 1 replicas within {TIMEOUT_MS} ms" in str(
        caught.value
    )
    assert caught.value.code == "redis_not_replicated"
    assert took >= TIMEOUT_MS / 1000  # WAIT waited its timeout (an upper bound is timing)
    replica_set.wait_synced()
    again = await wait_client.enqueue("t.x", queue="emails", idempotency_key="order-7")
    assert not again.created  # the first submit's task, found by its key
    streams = Keys(wait_client.settings.namespace).queue("emails").streams
    assert await wait_client.redis.xlen(streams[5]) == 1


async def test_a_batch_over_queues_is_confirmed_on_its_connection(
    wait_client: Client, replica_set: ReplicaSet
) -> None:
    batch = [
        TaskRequest(task="t.x", queue=queue, idempotency_key=f"k-{queue}")
        for queue in ("a", "b", "c")
    ]
    await wait_client.enqueue_many([TaskRequest(task="t.x", queue=q, priority=1) for q in "abc"])
    with replica_set.replicas[0].frozen(), pytest.raises(NotReplicatedError):
        await wait_client.enqueue_many(batch)
    replica_set.wait_synced()
    handles = await wait_client.enqueue_many(batch)
    assert all(not isinstance(h, Exception) for h in handles), handles
    keys = Keys(wait_client.settings.namespace)
    for queue in ("a", "b", "c"):
        assert await wait_client.redis.xlen(keys.queue(queue).streams[5]) == 1


async def test_a_finish_not_confirmed_is_sent_again_safely(
    master: aioredis.Redis, wait_settings: Settings, replica_set: ReplicaSet
) -> None:
    """The worker retries a finish whose WAIT failed; the retry is a replay of the recorded
    outcome (lua/finish.lua), so the task ends once."""
    h = Harness(master, wait_settings)
    rand = await h.new()
    (claimed,) = await h.claim()
    with replica_set.replicas[0].frozen(), pytest.raises(NotReplicatedError):
        await h.ok(claimed)
    replica_set.wait_synced()
    assert await h.finish(Finish(held(claimed), "ok", '"ok"', "1")) == ["succeeded"]
    assert await h.event_types(rand) == ["task.queued", "task.started", "task.succeeded"]
    await h.assert_invariants()


async def test_an_admin_transaction_waits_for_the_replica(
    wait_client: Client, replica_set: ReplicaSet
) -> None:
    await wait_client.enqueue("t.x", queue="emails")
    admin = Admin(wait_client)
    with replica_set.replicas[0].frozen(), pytest.raises(NotReplicatedError):
        await admin.pause("emails", actor="alice")
    replica_set.wait_synced()
    await admin.pause("emails", actor="alice")
    assert (await admin.queue("emails")).paused


async def test_without_the_setting_a_stalled_replica_does_not_slow_a_submit(
    replica_set: ReplicaSet,
) -> None:
    settings = load_settings({}, redis_url=replica_set.url, **FAST)
    async with Client(connect(settings), settings, owns_redis=True) as client:
        with replica_set.replicas[0].frozen():
            handle = await client.enqueue("t.x", queue="emails")
            assert handle.created
        await wait_until(lambda: on_replica(replica_set, client.keys.queue("emails").meta))
