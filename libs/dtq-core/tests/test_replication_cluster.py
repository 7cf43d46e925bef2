"""``DTQ_REDIS_WAIT_REPLICAS`` on a real Redis Cluster (3 masters, 1 replica each): the ``WAIT``
of each write goes to the master that ran it, on the connection that carried it (redis-py
would send a keyless command to a random node)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dtq_core.client import Client
from dtq_core.errors import NotReplicatedError
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import TaskRequest
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer
from dtq_devtools.testing.plugin import FAST
from dtq_devtools.testing.topologies import RedisClusterSet, online_replicas

pytestmark = pytest.mark.slow  # six redis-server processes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterSet]:
    made = RedisClusterSet(Path(tmp_path_factory.mktemp("cluster-wait")), replicas=1)
    made.start()
    yield made
    made.stop()


@pytest.fixture
async def wait_client(cluster: RedisClusterSet) -> AsyncIterator[Client]:
    settings: Settings = load_settings(
        {}, redis_url=cluster.url, redis_wait_replicas=1, redis_wait_timeout_ms=600, **FAST
    )
    client = Client(connect(settings), settings, owns_redis=True)
    for node in cluster.primaries():
        with cluster.client(node) as c:
            c.flushall()
    yield client
    await client.aclose()


def replica_of(cluster: RedisClusterSet, key: str) -> RedisServer:
    """The replica of the master serving ``key``."""
    with cluster.client(cluster.master_of(key)) as c:
        info = c.info("replication")
    port = int(info["slave0"]["port"])
    return next(n for n in cluster.nodes if n.port == port)


def queues_on_two_masters(cluster: RedisClusterSet, keys: Keys) -> tuple[str, str]:
    by_master: dict[int, str] = {}
    for i in range(64):
        by_master.setdefault(cluster.master_of(keys.queue(f"q{i}").meta).port, f"q{i}")
        if len(by_master) == 2:
            first, second = by_master.values()
            return first, second
    raise AssertionError("64 queues on one master")


def test_a_started_cluster_has_every_replica_synced(cluster: RedisClusterSet) -> None:
    """``start`` returns only once each replica's first sync is done (Redis delays it 5 s by
    default): a master killed right after the start used to leave an empty replica to take
    over its slots, the queue registry with them, and the new scheduler leader promoted
    nothing (tests/chaos/test_failover_leader.py on a cluster)."""
    masters = cluster.primaries()
    assert len(masters) == cluster.masters
    assert all(online_replicas(m) == 1 for m in masters)
    for master in masters:
        with cluster.client(master) as c:
            port = int(c.info("replication")["slave0"]["port"])
        with cluster.client(next(n for n in cluster.nodes if n.port == port)) as c:
            info = c.info("replication")
        assert info["master_link_status"] == "up"
        assert info["master_sync_in_progress"] == 0


async def test_a_batch_over_masters_is_confirmed_by_each_masters_replica(
    wait_client: Client, cluster: RedisClusterSet
) -> None:
    queues = [f"q{i}" for i in range(6)]
    handles = await wait_client.enqueue_many(
        [TaskRequest(task="t.x", queue=q, idempotency_key=q) for q in queues]
    )
    assert all(not isinstance(h, Exception) for h in handles), handles
    assert len({cluster.master_of(wait_client.keys.queue(q).meta).port for q in queues}) > 1


async def test_a_stalled_replica_fails_only_the_writes_of_its_master(
    wait_client: Client, cluster: RedisClusterSet
) -> None:
    stalled, healthy = queues_on_two_masters(cluster, wait_client.keys)
    for queue in (stalled, healthy):  # registered (a global key) while all replicas answer
        await wait_client.enqueue("t.x", queue=queue, priority=1)
    with replica_of(cluster, wait_client.keys.queue(stalled).meta).frozen():
        with pytest.raises(NotReplicatedError):
            await wait_client.enqueue("t.x", queue=stalled, idempotency_key="k")
        assert (await wait_client.enqueue("t.x", queue=healthy)).created
        with pytest.raises(NotReplicatedError):
            await wait_client.enqueue_many(
                [TaskRequest(task="t.x", queue=q, idempotency_key="k") for q in (healthy, stalled)]
            )
    with cluster.client(cluster.master_of(wait_client.keys.queue(stalled).meta)) as c:
        c.execute_command("WAIT", 1, 5000)  # the replica caught up
    again = await wait_client.enqueue("t.x", queue=stalled, idempotency_key="k")
    assert not again.created  # the unconfirmed task, found by its key
