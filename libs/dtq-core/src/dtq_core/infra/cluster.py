"""Redis Cluster: the client dtq uses on it, and the slot of a key.

Every script, transaction and multi-key command of dtq touches one queue, so one slot
(:mod:`dtq_core.protocol.keys`); what spans slots (a read of several queues' event streams)
is split by slot in :func:`dtq_core.infra.connection.xread`.

redis-py finds the slot of ``FCALL``, ``XREAD`` and ``XREADGROUP`` by asking the server
(``COMMAND GETKEYS``, one more round trip per call); :class:`DtqCluster` reads it from the
arguments instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator
from typing import Any, cast

from redis._parsers import AsyncCommandsParser
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.exceptions import MaxConnectionsError, RedisClusterException

from dtq_core.infra.clock import test_clock_key

POLL_S = 0.02
"""How often a read of streams in several slots looks again while nothing is new: an event's
added latency on a cluster, at most (a read of one slot blocks in Redis, as on one Redis)."""

_KEYS_AFTER_NUMKEYS = frozenset({"FCALL", "FCALL_RO"})  # dtq sends no scripts (F14)
_STREAM_READS = frozenset({"XREAD", "XREADGROUP"})


POOL_POLL_S = 0.005
"""How often a command that found its node's connections all busy looks for a free one."""


class CommandTableOnce(AsyncCommandsParser):
    """redis-py's table of commands (``COMMAND``), read once per client.

    redis-py reads it again at every read of the cluster's map, from the first master of the
    new map. While a failover is under way that master may be the dead one, which the map
    still names until its replica is elected: every read of the map failed, so every command
    of the client failed, for every slot, until the election (the queues of the masters that
    were up paused with the dead one's, and a worker's cancellation listener, which reads the
    map after a failure, ended the worker). The table does not change with the map."""

    async def initialize(self, node: ClusterNode | None = None) -> None:
        if node is not None:
            self.node = node
        if not self.commands:
            await super().initialize(node)


class DtqCluster(RedisCluster):
    """redis-py's cluster client, with the slot of dtq's hot commands found without a round
    trip, and a command that finds its node's connections all busy waiting up to
    ``pool_wait_s`` for one (redis-py refuses it at once), as on one Redis
    (:class:`dtq_core.infra.connection.BoundedWaits`).

    The wait looks again every :data:`POOL_POLL_S`: a node's pool has no hook on release. It
    only costs anything while the pool is full. The table of commands is read once
    (:class:`CommandTableOnce`)."""

    pool_wait_s: float = 2.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands_parser = CommandTableOnce()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        # redis-py decides where a command goes before it reads the cluster's map on first
        # use: the commands a new client sends side by side went to random nodes, each came
        # back MOVED, and every fifth MOVED closed every connection of the client, in-flight
        # commands included. The map is read first (a no-op once read).
        _ = await self.initialize()
        return await super().execute_command(*args, **kwargs)

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.pool_wait_s
        while True:
            try:
                return await super()._execute_command(target_node, *args, **kwargs)
            except MaxConnectionsError:
                # Refused before anything was sent: waiting and sending again is safe.
                if loop.time() >= deadline:
                    raise MaxConnectionsError(
                        f"all {target_node.max_connections} Redis connections of this process "
                        f"to {target_node.name} were busy for {self.pool_wait_s} s "
                        "(DTQ_REDIS_MAX_CONNECTIONS)"
                    ) from None
                await asyncio.sleep(POOL_POLL_S)

    async def _determine_slot(self, command: str, *args: Any) -> int:
        name = command.upper()
        if name in _KEYS_AFTER_NUMKEYS and len(args) >= 2:
            keys = args[2 : 2 + int(args[1])]
            if keys:
                return self._one_slot(command, keys)
        elif name in _STREAM_READS:
            upper = [a.upper() if isinstance(a, str) else a for a in args]
            if "STREAMS" in upper:
                rest = args[upper.index("STREAMS") + 1 :]
                return self._one_slot(command, rest[: len(rest) // 2])
        return await super()._determine_slot(command, *args)

    def reread_map(self) -> None:
        """Have the next command read the cluster's map again (who serves which slot): for a
        connection that failed outside redis-py's command path, such as a subscription to a
        master that failed over, whose next try must not go to the same dead node. The read
        happens in that command, whose caller handles its failure (a read now, in an error
        handler, raised out of it while the map still named the dead master)."""
        self._initialize = True

    async def aclose(self) -> None:
        """Close every connection to every node, also while the map is marked for a re-read.

        redis-py's ``aclose`` closes nothing while ``_initialize`` is set, which it is after
        :meth:`reread_map`, a failed pipeline or any connection error: the client's sockets
        were then left to the garbage collector (a ResourceWarning in whatever ran next)."""
        self._initialize = False  # redis-py's aclose reads it as "there is nothing to close"
        await super().aclose()

    def pipeline(
        self, transaction: Any | None = None, shard_hint: Any | None = None
    ) -> ClusterPipeline:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        return DtqClusterPipeline(self, transaction)  # type: ignore[abstract]  # as redis-py's

    def _one_slot(self, command: str, keys: Any) -> int:
        slots = {self.keyslot(k) for k in keys}
        if len(slots) != 1:
            raise RedisClusterException(f"{command} - all keys must map to the same key slot")
        return slots.pop()


class DtqClusterPipeline(ClusterPipeline):
    """A cluster pipeline that may be awaited after each queued command.

    dtq writes ``await pipe.hset(...)`` (redis-py's pipeline for one Redis allows it);
    ``ClusterPipeline`` runs its set-up on every ``await``, which empties the queue of
    commands, so each ``await`` here only makes sure the cluster's map is read."""

    def __await__(self) -> Generator[Any, None, ClusterPipeline]:
        return self._ready().__await__()

    async def _ready(self) -> ClusterPipeline:
        _ = await self.cluster_client.initialize()
        return self

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        """Run the queued commands; after a failure that may mean the slot map changed (a
        master down, a failover under way) the next command reads the map again.

        redis-py reads it again after such a pipeline failure only on the way to retrying
        the pipeline itself, and dtq's clients never retry (``connection.connect``): without
        this, every later pipeline would go on sending to the dead master after a failover,
        for the life of the client."""
        try:
            results = await super().execute(raise_on_error, allow_redirections)
        except RedisCluster.ERRORS_ALLOW_RETRY:
            self.cluster_client._initialize = True
            raise
        if any(isinstance(r, RedisCluster.ERRORS_ALLOW_RETRY) for r in results):
            self.cluster_client._initialize = True
        return results


def is_cluster(redis: Any) -> bool:
    """Whether ``redis`` is a client of a Redis Cluster."""
    return isinstance(redis, RedisCluster)


async def subscriber(redis: Any) -> PubSub:
    """A pub/sub client of ``redis``, ready to subscribe.

    Classic ``PUBLISH`` reaches the subscribers of every node of a cluster, so a subscription
    on one node hears it all; redis-py picks the node from the channel's slot, which needs
    the cluster's map read first (a client whose first command is a subscription has none).
    """
    if is_cluster(redis):
        _ = await redis.initialize()
    return cast(PubSub, redis.pubsub())


def after_failure(redis: Any) -> None:
    """After a connection that redis-py did not see fail (a subscription): on a cluster, have
    the next command read the map again, so that it finds the master that serves the slot
    now."""
    if isinstance(redis, DtqCluster):
        redis.reread_map()


async def masters(redis: Any) -> list[ClusterNode | None]:
    """Every master of a cluster; ``[None]`` for one Redis (or a Sentinel-managed master),
    which :func:`execute_on` sends to as any command."""
    if not is_cluster(redis):
        return [None]
    _ = await redis.initialize()  # the cluster's map is read on first use (then a no-op)
    return list(redis.get_primaries())


async def execute_on(redis: Any, master: ClusterNode | None, *command: Any) -> Any:
    """``command`` on ``master`` (one of :func:`masters`)."""
    if master is None:
        return await redis.execute_command(*command)
    return await redis.execute_command(*command, target_nodes=master)


async def each_master(redis: Any, *command: Any) -> list[Any]:
    """``command`` run on every master, one reply per master (a single reply on one Redis or
    a Sentinel-managed master).

    For what belongs to a server rather than to a key: its configuration (``CONFIG GET``),
    its function library (``FUNCTION LIST``, the library's version). redis-py sends such a
    keyless command to one node of a cluster (``CONFIG GET``, ``FCALL`` of a function with no
    keys) or merges the replies of all of them; here each master answers for itself.
    """
    return list(
        await asyncio.gather(*(execute_on(redis, m, *command) for m in await masters(redis)))
    )


async def scan_slot(redis: Any, key: str, match: str, count: int) -> AsyncIterator[str]:
    """The keys matching ``match`` (a pattern within the hash tag of ``key``) on the Redis that
    holds ``key``: on a cluster, its master only, not a scan of every master's keyspace."""
    if not is_cluster(redis):
        async for found in redis.scan_iter(match=match, count=count):
            yield found
        return
    _ = await redis.initialize()
    master = redis.get_node_from_key(key)
    async for found in redis.scan_iter(match=match, count=count, target_nodes=master):
        yield found


async def time_of(redis: Any, key: str | None = None) -> Any:
    """``TIME`` of the Redis that holds ``key`` (on a cluster, each master has its own clock:
    an age is computed on the clock that stamped it, the master of ``key``). Under a test
    kit's clock, shifted by its offset (:mod:`dtq_core.infra.clock`)."""
    shift = test_clock_key()
    if shift is not None:
        if is_cluster(redis):
            raise RuntimeError("the test clock runs on one redis-server, not on a cluster")
        async with redis.pipeline(transaction=False) as pipe:
            await pipe.time()
            await pipe.get(shift)
            (sec, usec), offset = await pipe.execute()
        total = int(sec) * 1_000_000 + int(usec) + int(offset or 0)
        return divmod(total, 1_000_000)
    if key is None or not is_cluster(redis):
        return await redis.time()
    _ = await redis.initialize()
    return await execute_on(redis, redis.get_node_from_key(key), "TIME")


# CRC16/XMODEM, as Redis Cluster uses for key slots.
_CRC16_TABLE: list[int] = []
for _i in range(256):
    _crc = _i << 8
    for _ in range(8):
        _crc = ((_crc << 1) ^ 0x1021) if _crc & 0x8000 else (_crc << 1)
    _CRC16_TABLE.append(_crc & 0xFFFF)


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16_TABLE[((crc >> 8) ^ byte) & 0xFF]
    return crc


def hash_slot(key: str | bytes) -> int:
    """The Redis Cluster slot of ``key`` (honours ``{hash tags}`` like the server does)."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end != -1 and end != start + 1:
            raw = raw[start + 1 : end]
    return _crc16(raw) % 16384
