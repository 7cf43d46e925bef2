"""The merged walk over every queue's event stream, newest first: submits come out one task
id at a time, every other entry as a position (see :mod:`dtq_core.ops.browse`)."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from dtq_core.infra.connection import StreamEntry
from dtq_core.ops.browse.cursor import Position
from dtq_core.protocol.keys import QueueKeys

_SUBMIT_TYPES = frozenset({"task.queued", "task.scheduled"})


def _entry_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


@dataclass(slots=True)
class _Candidate:
    pos: Position
    qk: QueueKeys
    rand: str
    name: str | None
    submit_type: str


class _Reader:
    """One queue's event stream, read backwards in chunks from a starting position."""

    def __init__(self, qk: QueueKeys, rank: int, after: Position | None) -> None:
        self.qk = qk
        self.rank = rank
        self.buffer: deque[StreamEntry] = deque()
        self.done = False
        self.max_index: int | None = None
        """Within the entry at the cursor's id, only indices below this one are left."""
        self.cursor_id: tuple[int, int] | None = None
        if after is None:
            self.upper = "+"
        elif qk.queue > after.queue:
            self.upper = f"({after.ms}-{after.seq}"
        else:
            self.upper = f"{after.ms}-{after.seq}"
            if qk.queue == after.queue:
                self.cursor_id = (after.ms, after.seq)
                self.max_index = after.index

    async def call(self, pipe: Pipeline, count: int) -> None:
        await pipe.xrevrange(self.qk.events, max=self.upper, min="-", count=count)

    def take(self, entries: Sequence[StreamEntry], count: int) -> None:
        self.buffer.extend(entries)
        if len(entries) < count:
            self.done = True
        elif entries:
            self.upper = f"({entries[-1][0]}"

    def key(self) -> tuple[int, int, int]:
        """Heap key of the head entry: the newest entry comes out of the min-heap first."""
        ms, seq = _entry_id(self.buffer[0][0])
        return (-ms, -seq, -self.rank)


class _Walk:
    """The merged walk over every queue's events, newest first, one position at a time."""

    def __init__(self, redis: aioredis.Redis, readers: list[_Reader], chunk: int) -> None:
        self.redis = redis
        self.readers = readers
        self.chunk = chunk

    async def _fill(self, readers: Sequence[_Reader]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for reader in readers:
                await reader.call(pipe, self.chunk)
            replies = await pipe.execute()
        for reader, entries in zip(readers, replies, strict=True):
            reader.take(cast(list[StreamEntry], entries), self.chunk)

    async def positions(self) -> AsyncGenerator[Position | _Candidate, None]:
        """Entries that are not submits come out as one :class:`Position`; a submit's task
        ids come out one :class:`_Candidate` each, the last id of the batch first."""
        await self._fill(self.readers)
        heap = [(r.key(), i) for i, r in enumerate(self.readers) if r.buffer]
        heapq.heapify(heap)
        while heap:
            _, i = heapq.heappop(heap)
            reader = self.readers[i]
            entry_id, fields = reader.buffer.popleft()
            ms, seq = _entry_id(entry_id)
            etype = fields.get("type", "")
            at_cursor = reader.cursor_id == (ms, seq)
            if etype in _SUBMIT_TYPES and "reason" not in fields and fields.get("ids"):
                rands = fields["ids"].split(",")
                names = fields["tasks"].split(",") if fields.get("tasks") else []
                top = len(rands)
                if at_cursor and reader.max_index is not None:
                    top = min(top, reader.max_index)
                for index in range(top - 1, -1, -1):
                    pos = Position(ms, seq, reader.qk.queue, index)
                    name = names[index] if index < len(names) else None
                    yield _Candidate(pos, reader.qk, rands[index], name, etype)
            elif not at_cursor:  # the cursor's own entry was examined on the previous page
                yield Position(ms, seq, reader.qk.queue, 0)
            if not reader.buffer and not reader.done:
                await self._fill([reader])
            if reader.buffer:
                heapq.heappush(heap, (reader.key(), i))
