"""The cluster client (``dtq_core.infra.cluster.DtqCluster``) on a real Redis Cluster
(``--redis cluster``): commands go to the master of their slot from the first one on, and a
burst that finds a node's connections busy waits for one."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from dtq_core.infra.cluster import DtqCluster, each_master, is_cluster
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings
from dtq_core.protocol.keys import Keys


async def _moved(redis: aioredis.Redis) -> int:
    """MOVED replies the masters sent so far."""
    stats = await each_master(redis, "INFO", "errorstats")
    return sum(int(s.get("errorstat_MOVED", {}).get("count", 0)) for s in stats)


@pytest.fixture
def cluster(redis: aioredis.Redis) -> aioredis.Redis:
    if not is_cluster(redis):
        pytest.skip("the routing of a Redis Cluster client")
    return redis


async def test_a_new_clients_first_commands_side_by_side_go_to_their_masters(
    cluster: aioredis.Redis, settings: Settings
) -> None:
    """redis-py routes a command before it has read the cluster's map: a new client's first
    commands went to random nodes and came back MOVED (and every fifth MOVED closed every
    connection of the client, failing the others in flight)."""
    keys = Keys(settings.namespace)
    before = await _moved(cluster)
    fresh = connect(settings)
    try:
        replies = await asyncio.gather(
            *(fresh.zrange(keys.workers, 0, -1) for _ in range(20)),
            *(fresh.sismember(keys.queues, "q") for _ in range(20)),
        )
        assert replies == [[]] * 20 + [False] * 20
    finally:
        await fresh.aclose()
    assert await _moved(cluster) == before


async def test_a_burst_beyond_a_nodes_connections_waits_for_one(
    cluster: aioredis.Redis, settings: Settings
) -> None:
    """Fifty commands on a client of two connections per node all answer (redis-py would
    refuse those that find both busy at once)."""
    small = connect(settings.with_overrides(redis_max_connections=2))
    try:
        replies = await asyncio.gather(*(small.incr("{burst}n") for _ in range(50)))
        assert sorted(replies) == list(range(1, 51))
    finally:
        await small.aclose()


def _open_sockets(client: DtqCluster) -> int:
    """Connections of ``client`` that hold a socket, on every node it knows."""
    manager = client.nodes_manager
    nodes = {*manager.nodes_cache.values(), *manager.startup_nodes.values()}
    return sum(1 for n in nodes for c in n._connections if c.is_connected)


async def test_a_client_whose_map_is_marked_stale_still_closes_its_connections(
    cluster: aioredis.Redis, settings: Settings
) -> None:
    """redis-py's ``aclose`` closes nothing while the map is marked for a re-read (after a
    failed subscription, a failed pipeline, a connection error): the client's sockets were
    left to the garbage collector (ResourceWarning: unclosed socket, in a later test)."""
    fresh = connect(settings)
    assert isinstance(fresh, DtqCluster)
    await each_master(fresh, "PING")
    assert _open_sockets(fresh) > 0
    fresh.reread_map()
    await fresh.aclose()
    assert _open_sockets(fresh) == 0
