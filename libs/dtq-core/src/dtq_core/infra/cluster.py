"""Redis Cluster: the client dtq uses on it, and the slot of a key.

Every script, transaction and multi-key command of dtq touches one queue, so one slot
(:mod:`dtq_core.protocol.keys`); what spans slots (a read of several queues' event streams)
is split by slot in :func:`dtq_core.infra.connection.xread`.

redis-py finds the slot of ``FCALL``, ``XREAD`` and ``XREADGROUP`` by asking the server
(``COMMAND GETKEYS``, one more round trip per call); :class:`DtqCluster` reads it from the
arguments instead.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException

POLL_S = 0.02
"""How often a read of streams in several slots looks again while nothing is new: an event's
added latency on a cluster, at most (a read of one slot blocks in Redis, as on one Redis)."""

_KEYS_AFTER_NUMKEYS = frozenset({"FCALL", "FCALL_RO"})  # dtq sends no scripts (F14)
_STREAM_READS = frozenset({"XREAD", "XREADGROUP"})


class DtqCluster(RedisCluster):
    """redis-py's cluster client, with the slot of dtq's hot commands found without a round
    trip."""

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
        if self.cluster_client._initialize:
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
