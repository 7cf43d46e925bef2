"""Partitioned queues: one queue spread over several Redis Cluster slots, so that one hot queue
uses several masters (docs/scaling.md, "Partitioned queues").

Partition 0 of queue ``hot`` is ``hot`` itself; partitions 1..N-1 are stored queues of their
own, ``hot~1`` .. ``hot~7``, each with every key a queue has (streams, delayed set, DLQ,
events, meta) under its own hash tag. The count lives in partition 0's meta hash
(:attr:`~dtq_core.protocol.fields.MetaField.PARTITIONS`) and only grows; the partitions are in
the queue registry, so the scheduler promotes, reclaims and trims them like any queue.

Producers place a task by its idempotency key when it has one (a jump consistent hash: when
the count grows, a key moves only to a new partition, and a replay of a key placed under an
earlier count of the idempotency window is sent where the first submit went), else round-robin.
Every reader of the layout trusts its copy for :data:`LAYOUT_TTL_S`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import redis.asyncio as aioredis

from dtq_core.errors import ValidationError
from dtq_core.names import MAX_PARTITIONS, partition_name
from dtq_core.protocol.fields import MetaField
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.submit import Prepared

LAYOUT_TTL_S = 1.0
"""How long a producer or worker trusts its copy of a queue's partition count: a growth
reaches every one of them within this time, without a restart."""

_JUMP_MUL = 2862933555777941757
_MASK = (1 << 64) - 1


def jump_hash(key: int, buckets: int) -> int:
    """Lamping and Veach's jump consistent hash of a 64-bit ``key`` into ``buckets``: when
    ``buckets`` grows from n to m, a key moves with probability (m - n) / m, and only to one of
    the new buckets."""
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * _JUMP_MUL + 1) & _MASK
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b


@dataclass(frozen=True, slots=True)
class Layout:
    """A queue's partitions: the count, and when each count took effect.

    Attributes:
        count: partitions (1: the queue is not partitioned).
        log: ``(count, since_ms)`` for each growth, oldest first (Redis time).
    """

    count: int = 1
    log: tuple[tuple[int, int], ...] = ()
    max_depth: int | None = None
    """The queue's own admission limit, when it sets one (the refusal names it)."""

    def names(self, queue: str) -> list[str]:
        """The stored names of ``queue``'s partitions, partition 0 (``queue``) first."""
        return [partition_name(queue, k) for k in range(self.count)]

    def counts_since(self, since_ms: float) -> set[int]:
        """Every count in effect at some moment after ``since_ms``, the current one included."""
        counts = [1, *(c for c, _ in self.log)]
        ends = [*(at for _, at in self.log), math.inf]  # a count held until the next growth
        return {self.count} | {c for c, end in zip(counts, ends, strict=True) if end > since_ms}


ONE = Layout()


def parse_layout(count: str | None, log: str | None, max_depth: str | None = None) -> Layout:
    """The layout from partition 0's meta fields (all absent: one partition)."""
    depth = int(max_depth) if max_depth else None
    if not count:
        return ONE if depth is None else Layout(max_depth=depth)
    entries: list[tuple[int, int]] = []
    for item in (log or "").split(","):
        c, sep, at = item.partition("@")
        if sep:
            entries.append((int(c), int(at)))
    return Layout(int(count), tuple(entries), depth)


async def read_layouts(redis: aioredis.Redis, keys: Keys, queues: Sequence[str]) -> list[Layout]:
    """The layouts of ``queues`` in one round trip (each is a single-key read)."""
    if not queues:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for q in queues:
            await pipe.hmget(keys.queue(q).meta, LAYOUT_FIELDS)
        replies = await pipe.execute()
    return [parse_layout(*_text(r)) for r in replies]


LAYOUT_FIELDS = [MetaField.PARTITIONS, MetaField.PARTITIONS_LOG, MetaField.CONFIG_DEPTH]


def _text(reply: Sequence[Any]) -> list[str | None]:
    return [v.decode() if isinstance(v, bytes) else v for v in reply]


class Layouts:
    """One client's copies of the layouts of the queues it submits to or serves, each trusted
    for :data:`LAYOUT_TTL_S`."""

    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._cache: dict[str, tuple[Layout, float]] = {}
        self._turn: dict[str, itertools.count[int]] = {}

    async def of(self, queues: Iterable[str]) -> dict[str, Layout]:
        """The layouts of ``queues``, rereading the stale ones in one round trip."""
        now = time.monotonic()
        wanted = list(dict.fromkeys(queues))
        stale = [q for q in wanted if now - self._cache.get(q, (ONE, -math.inf))[1] > LAYOUT_TTL_S]
        if stale:
            for q, layout in zip(
                stale, await read_layouts(self.redis, self.keys, stale), strict=True
            ):
                self._cache[q] = (layout, now)
        return {q: self._cache[q][0] for q in wanted}

    def cached(self, queue: str) -> Layout:
        """The layout of ``queue`` as last read (one partition when never read)."""
        cached = self._cache.get(queue)
        return cached[0] if cached is not None else ONE

    def forget(self, queue: str) -> None:
        self._cache.pop(queue, None)

    async def place(self, prepared: Sequence[Prepared], idem_ttl_ms: int) -> list[Prepared]:
        """``prepared`` with each task of a partitioned queue moved to its partition.

        A task with a group goes where :func:`jump_hash` of the group puts it under the current
        count: a group lives in one partition, so its limits and its turn are exact (a growth
        moves a group's new tasks at most once, to a new partition).
        Otherwise a task with a dedup key or an idempotency key goes where :func:`jump_hash`
        of the key puts it under the current count, unless a submit of the same key under an earlier
        count of the idempotency window went elsewhere (then it goes there, and finds the
        original task).
        One round trip for the layouts (when stale) and one for those lookups (when a queue
        grew within the window); nothing more for queues of one partition.
        """
        layouts = await self.of(p.queue for p in prepared)
        if all(layout.count == 1 for layout in layouts.values()):
            return list(prepared)
        out = list(prepared)
        lookups: list[tuple[int, list[int], str]] = []  # (index, candidates, key hash)
        since_ms = time.time() * 1000 - idem_ttl_ms
        for i, p in enumerate(prepared):
            layout = layouts[p.queue]
            if layout.count == 1:
                continue
            if p.group:
                point = int(hashlib.sha256(p.group.encode()).hexdigest()[:16], 16)
                k = jump_hash(point, layout.count)
            elif p.wf:
                # A workflow's step goes where its rand puts it: submitted again, it finds
                # itself (under the same count).
                k = jump_hash(int(p.rand[:16], 16), layout.count)
            elif p.dedup or p.idem:
                # A dedup key decides first: every submit of the key meets in one partition
                # (a replay carries the same dedup key, so idempotency holds too).
                key_hash = p.dedup.split("|")[1] if p.dedup else p.idem.partition("|")[0]
                point = int(key_hash[:16], 16)
                k = jump_hash(point, layout.count)
                earlier = {jump_hash(point, c) for c in layout.counts_since(since_ms)} - {k}
                if earlier:
                    lookups.append((i, sorted(earlier), key_hash))
            else:
                k = next(self._turn_of(p.queue)) % layout.count
            out[i] = msgspec.structs.replace(p, queue=partition_name(p.queue, k))
        if lookups:
            await self._follow_earlier(out, prepared, lookups)
        return out

    def _turn_of(self, queue: str) -> itertools.count[int]:
        turn = self._turn.get(queue)
        if turn is None:
            # Producers start at different partitions, so that many short-lived ones spread.
            turn = self._turn[queue] = itertools.count(random.randrange(1 << 16))  # noqa: S311
        return turn

    async def _follow_earlier(
        self,
        out: list[Prepared],
        prepared: Sequence[Prepared],
        lookups: list[tuple[int, list[int], str]],
    ) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for i, candidates, key_hash in lookups:
                queue = prepared[i].queue
                for k in candidates:
                    qk = self.keys.queue(partition_name(queue, k))
                    held = qk.dedup(key_hash) if prepared[i].dedup else qk.idem(key_hash)
                    await pipe.exists(held)
            found = iter(await pipe.execute())
        for i, candidates, _ in lookups:
            hits = [k for k in candidates if next(found)]
            if hits:
                out[i] = msgspec.structs.replace(
                    prepared[i], queue=partition_name(prepared[i].queue, hits[0])
                )


def partition_depth(max_depth: int, count: int) -> int:
    """Each partition's share of DTQ_MAX_QUEUE_DEPTH (0: no bound): tasks spread evenly, so
    the whole queue admits about ``max_depth``."""
    return max_depth if max_depth == 0 or count == 1 else max(1, math.ceil(max_depth / count))


def check_partitions(value: object) -> int:
    """A partition count, checked: an integer from 1 to MAX_PARTITIONS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARTITIONS:
        raise ValidationError(
            f"partitions must be an integer from 1 to {MAX_PARTITIONS}, got {value!r}",
            field="partitions",
        )
    return value
