"""What a test asks of every Redis server behind a client, on any topology.

On one Redis these are plain commands. On a cluster, ``KEYS``, ``CLIENT LIST`` and ``ACL
SETUSER`` reach one node only, so a test that counts keys, looks for a blocked reader or makes
an ACL user asks every master here.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import redis as syncredis
import redis.asyncio as aioredis
from redis.cluster import ClusterNode as SyncClusterNode
from redis.sentinel import Sentinel

from dtq_core.infra.cluster import each_master, execute_on, is_cluster, masters
from dtq_core.infra.connection import connect
from dtq_core.infra.redis_url import Topology, parse_redis_url


async def all_keys(redis: aioredis.Redis, match: str = "*") -> list[str]:
    """Every key matching ``match``, on every master (a SCAN of each)."""
    return sorted({str(key) async for key in redis.scan_iter(match=match, count=1000)})


MASTER = "dtq-master"
"""The field each entry of :func:`clients` names its master with (for :func:`kill_client`)."""


async def clients(redis: aioredis.Redis) -> list[dict[str, Any]]:
    """``CLIENT LIST`` of every master, as one list."""
    found: list[dict[str, Any]] = []
    for master in await masters(redis):
        for entry in await execute_on(redis, master, "CLIENT LIST"):
            found.append({**entry, MASTER: master})
    return found


async def kill_client(redis: aioredis.Redis, entry: dict[str, Any]) -> None:
    """``CLIENT KILL ID`` of a connection :func:`clients` listed, on its master."""
    await execute_on(redis, entry[MASTER], "CLIENT", "KILL", "ID", str(entry["id"]))


async def acl_setuser(redis: aioredis.Redis, user: str, *rules: str) -> None:
    """``ACL SETUSER user rules...`` on every master (ACL users are not replicated or shared
    between the nodes of a cluster)."""
    await each_master(redis, "ACL", "SETUSER", user, *rules)


async def acl_deluser(redis: aioredis.Redis, user: str) -> None:
    await each_master(redis, "ACL", "DELUSER", user)


async def master_of(redis: aioredis.Redis, key: str) -> Any:
    """The master that holds ``key`` (for :func:`dtq_core.infra.cluster.execute_on`); ``None``
    on one Redis."""
    if not is_cluster(redis):
        return None
    _ = await redis.initialize()
    return redis.get_node_from_key(key)  # type: ignore[attr-defined]


def with_user(url: str, user: str, password: str) -> str:
    """``url`` (any form of ``DTQ_REDIS_URL`` without user info) logging in as ``user``."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{user}:{password}@{rest}"


def flush_all(url: str) -> None:
    """``FLUSHALL`` of every master behind ``url`` (any form of ``DTQ_REDIS_URL``), from code
    without an event loop."""

    async def flush() -> None:
        redis = connect(url)
        try:
            await redis.flushall()
        finally:
            await redis.aclose()

    asyncio.run(flush())


def sync_client(url: str) -> syncredis.Redis:
    """A synchronous redis-py client (``decode_responses=True``) of any form of
    ``DTQ_REDIS_URL``, for tests without an event loop (redis-py parses only ``redis://``)."""
    target = parse_redis_url(url)
    auth: dict[str, Any] = {"username": target.username, "password": target.password}
    if target.tls:
        auth |= {"ssl": True, **dict(target.tls_options)}
    made: Any
    if target.topology is Topology.CLUSTER:
        nodes = [SyncClusterNode(host, port) for host, port in target.nodes]  # type: ignore[no-untyped-call]  # unannotated in redis-py
        made = syncredis.RedisCluster(startup_nodes=nodes, decode_responses=True, **auth)
    elif target.topology is Topology.SENTINEL:
        sentinel = Sentinel(  # type: ignore[no-untyped-call]  # unannotated in redis-py
            list(target.nodes), sentinel_kwargs={"password": target.sentinel_password}
        )
        made = sentinel.master_for(target.master, db=target.db, decode_responses=True, **auth)  # type: ignore[no-untyped-call]  # unannotated
    else:
        made = syncredis.Redis.from_url(url, decode_responses=True)
    return cast(syncredis.Redis, made)
