"""Queue statistics: ``GET /queues``, ``GET /queues/{q}`` and ``dtq status``.

Numbers come from Redis, never from counting by hand: the depth of a priority stream is its
consumer group's ``lag`` (streams are trimmed lazily, so ``XLEN`` over-counts; when Redis
cannot tell the lag, the entries above the group's last-delivered id are counted, as the submit
script's admission control does), in flight is the group's ``pending``, delayed is the delayed
set's size and dead is the DLQ stream's length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec
from redis.exceptions import ResponseError

from dtq_core.infra.connection import answering, server_ms
from dtq_core.names import PRIORITIES, split_partition
from dtq_core.ops.admin.base import AdminPart, _entries
from dtq_core.ops.admin.config import CONFIG_FIELDS, config_from
from dtq_core.protocol.fields import MetaField
from dtq_core.protocol.keys import GROUP

COUNT_PAGE = 1000
"""Entries per read when a stream's undelivered entries must be counted one by one."""


class QueueStats(msgspec.Struct, frozen=True, kw_only=True):
    """A queue at one moment, as ``GET /queues/{q}`` and ``dtq status`` show it."""

    name: str
    paused: bool
    depth: int
    """Tasks ready to run (every priority); delayed and in-flight tasks are not included."""
    depth_by_priority: dict[str, int]
    """``"0"`` .. ``"9"`` to the number of tasks waiting at that priority."""
    delayed: int
    """Scheduled tasks and retries waiting for their due time."""
    in_flight: int
    dead: int
    oldest_waiting_age_s: float | None
    """Age of the oldest task ready to run (since it was queued), or ``None`` when none is."""
    partitions: int = 1
    """Partitions the queue is split into (docs/scaling.md, "Partitioned queues"); every
    other number here is the whole queue's."""
    depth_by_partition: list[int] = msgspec.field(default_factory=list)
    """Tasks ready to run in each partition, partition 0 first (one item when the queue is
    not partitioned)."""
    max_depth: int | None = None
    """Its admission limit (``None``: DTQ_MAX_QUEUE_DEPTH of each producer)."""
    rate: str | None = None
    """Tasks started per period across every worker (``None``: no limit)."""
    burst: int | None = None
    """Starts the rate lets through at once (``None``: a tenth of a second's worth)."""
    concurrency: int | None = None
    """Tasks running at once across every worker (``None``: no limit)."""
    group_concurrency: int | None = None
    """Tasks of one group running at once (``None``: no limit)."""
    group_rate: str | None = None
    """Tasks of one group started per period (``None``: no limit)."""
    groups: int = 0
    """Groups holding tasks (waiting, queued or running; docs/flow-control.md, "Groups")."""
    waiting_in_groups: int = 0
    """Tasks waiting in their group for its turn or its limits, not counted in ``depth``
    (which counts what workers can take now)."""


def merged(name: str, parts: Sequence[QueueStats]) -> QueueStats:
    """One queue's statistics from those of its partitions (partition 0 first)."""
    first = parts[0]
    if len(parts) == 1:
        return msgspec.structs.replace(first, depth_by_partition=[first.depth])
    ages = [p.oldest_waiting_age_s for p in parts if p.oldest_waiting_age_s is not None]
    return QueueStats(
        max_depth=first.max_depth,
        rate=first.rate,
        burst=first.burst,
        concurrency=first.concurrency,
        group_concurrency=first.group_concurrency,
        group_rate=first.group_rate,
        groups=sum(p.groups for p in parts),
        waiting_in_groups=sum(p.waiting_in_groups for p in parts),
        name=name,
        paused=parts[0].paused,
        depth=sum(p.depth for p in parts),
        depth_by_priority={
            str(k): sum(p.depth_by_priority[str(k)] for p in parts) for k in range(PRIORITIES)
        },
        delayed=sum(p.delayed for p in parts),
        in_flight=sum(p.in_flight for p in parts),
        dead=sum(p.dead for p in parts),
        oldest_waiting_age_s=max(ages) if ages else None,
        partitions=len(parts),
        depth_by_partition=[p.depth for p in parts],
    )


def by_queue(stored: Iterable[str]) -> dict[str, list[str]]:
    """Stored queue names (the registry's members) by queue, each queue's partitions in
    order, partition 0 first; names that are neither are left out."""
    found: dict[str, list[tuple[int, str]]] = {}
    for name in stored:
        parts = split_partition(name)
        if parts is not None:
            found.setdefault(parts[0], []).append((parts[1], name))
    return {q: [n for _, n in sorted(found[q])] for q in sorted(found)}


@dataclass(frozen=True, slots=True)
class _Stream:
    waiting: int | None
    """``None`` when the group's lag is unknown: the entries above ``after`` are counted."""
    pending: int
    after: str | None
    """XRANGE lower bound of the oldest undelivered entry; ``None`` when nothing waits."""


def _checked(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def _stream_state(groups: Any, length: int) -> _Stream:
    if isinstance(groups, ResponseError):
        if "no such key" in str(groups).lower():
            return _Stream(0, 0, None)
        raise groups
    group = next((g for g in groups if g.get("name") == GROUP), None)
    if group is None:
        return _Stream(length, 0, "-" if length else None)
    lag = group.get("lag")
    after = f"({group['last-delivered-id']}"
    pending = int(group.get("pending") or 0)
    if lag is None:
        # Unknown after a deletion at or above the group's position while older entries
        # remain (docs/architecture.md, "Redis data model"); XLEN would count delivered
        # entries the lazy trim has not dropped yet, so the undelivered ones are counted (as
        # the submit script does).
        return _Stream(None, pending, after)
    return _Stream(int(lag), pending, after if int(lag) else None)


def _entry_ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


class QueueStatsReader(AdminPart):
    """Reads queue statistics: every registered queue in four round trips, or one queue."""

    async def registered(self) -> dict[str, list[str]]:
        """Every registered queue's stored queues (its partitions, partition 0 first), by
        queue name, sorted (one round trip)."""
        groups = by_queue(cast(set[str], await self.redis.smembers(self.keys.queues)))
        # A partition whose queue is gone from the registry (a delete under way) is not shown.
        return {q: names for q, names in groups.items() if names[0] == q}

    @answering
    async def queues(self) -> list[QueueStats]:
        """Statistics of every registered queue, sorted by name (four round trips, whatever
        their number)."""
        groups = await self.registered()
        stats = iter(await self._stats([n for names in groups.values() for n in names]))
        return [merged(q, [next(stats) for _ in names]) for q, names in groups.items()]

    @answering
    async def stored(self) -> list[QueueStats]:
        """Statistics of every stored queue, each partition of a partitioned queue on its own
        (named as stored, ``hot~3``): what the per-minute history notes."""
        groups = await self.registered()
        return await self._stats([n for names in groups.values() for n in names])

    @answering
    async def queue(self, name: str) -> QueueStats:
        """Statistics of one queue.

        Raises:
            InvalidNameError: ``name`` is not a valid queue name.
            QueueNotFoundError: no task was ever submitted to it.
        """
        parts = await self._partitions(name)
        return merged(name, await self._stats([qk.queue for qk in parts]))

    async def _stats(self, names: Sequence[str]) -> list[QueueStats]:
        if not names:
            return []
        per_queue = 5 + 2 * PRIORITIES
        # Ages are read on one clock: on a cluster, the first queue's master (the masters'
        # clocks differ by their hosts' skew, milliseconds against ages in seconds).
        now_ms = await server_ms(self.redis, self.keys.queue(names[0]).meta)
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                qk = self.keys.queue(name)
                await pipe.hmget(qk.meta, [MetaField.PAUSED, *CONFIG_FIELDS])
                for stream in qk.streams:
                    await pipe.xinfo_groups(stream)
                    await pipe.xlen(stream)
                await pipe.zcard(qk.delayed)
                await pipe.xlen(qk.dlq)
                await pipe.get(qk.groups_waiting)
                await pipe.scard(qk.groups)
            replies = await pipe.execute(raise_on_error=False)
        parsed: list[tuple[list[Any], list[_Stream]]] = []
        for i in range(len(names)):
            chunk = replies[i * per_queue : (i + 1) * per_queue]
            streams = [
                _stream_state(chunk[1 + 2 * p], int(_checked(chunk[2 + 2 * p])))
                for p in range(PRIORITIES)
            ]
            parsed.append((chunk, streams))
        parsed = [
            (chunk, await self._counted(name, streams))
            for name, (chunk, streams) in zip(names, parsed, strict=True)
        ]
        oldest = await self._oldest(names, [s for _, s in parsed], now_ms)
        out: list[QueueStats] = []
        for name, (chunk, streams), age in zip(names, parsed, oldest, strict=True):
            depth = {str(p): s.waiting or 0 for p, s in enumerate(streams)}
            paused, *asked = _checked(chunk[0])
            config = config_from(1, asked)
            out.append(
                QueueStats(
                    max_depth=config.max_depth,
                    rate=config.rate,
                    burst=config.burst,
                    concurrency=config.concurrency,
                    group_concurrency=config.group_concurrency,
                    group_rate=config.group_rate,
                    groups=int(_checked(chunk[-1])),
                    waiting_in_groups=int(_checked(chunk[-2]) or 0),
                    name=name,
                    paused=paused == "1",
                    depth=sum(depth.values()),
                    depth_by_priority=depth,
                    delayed=int(_checked(chunk[-4])),
                    in_flight=sum(s.pending for s in streams),
                    dead=int(_checked(chunk[-3])),
                    oldest_waiting_age_s=age,
                )
            )
        return out

    async def _counted(self, name: str, streams: list[_Stream]) -> list[_Stream]:
        """``streams`` with every unknown ``waiting`` counted, a page of entries at a time.

        Only streams whose lag Redis cannot tell cost a read (until the workers' next
        delivery moves the group past the deletion that made it unknown).
        """
        if all(s.waiting is not None for s in streams):
            return streams
        qk = self.keys.queue(name)
        out: list[_Stream] = []
        for p, s in enumerate(streams):
            if s.waiting is not None or s.after is None:
                out.append(s)
                continue
            count, low = 0, s.after
            while entries := _entries(
                await self.redis.xrange(qk.streams[p], min=low, max="+", count=COUNT_PAGE)
            ):
                count += len(entries)
                low = f"({entries[-1][0]}"
            out.append(_Stream(count, s.pending, s.after if count else None))
        return out

    async def _oldest(
        self, names: Sequence[str], streams: Sequence[list[_Stream]], now_ms: int
    ) -> list[float | None]:
        """The age of each queue's oldest undelivered entry (one pipeline for every queue)."""
        asked: list[int] = []
        async with self.redis.pipeline(transaction=False) as pipe:
            for i, name in enumerate(names):
                qk = self.keys.queue(name)
                for p, s in enumerate(streams[i]):
                    if s.after is not None:
                        await pipe.xrange(qk.streams[p], min=s.after, max="+", count=1)
                        asked.append(i)
            replies = await pipe.execute() if asked else []
        ages: list[float | None] = [None] * len(names)
        for i, entries in zip(asked, replies, strict=True):
            if not entries:
                continue
            age = max(0, now_ms - _entry_ms(entries[0][0])) / 1000
            current = ages[i]
            ages[i] = age if current is None else max(current, age)
        return ages
