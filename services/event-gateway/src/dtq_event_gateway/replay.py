"""Reading a stream from a cursor position, and deciding when a client has lost events.

Each page is read together with the stream's ``XINFO`` in one ``MULTI`` (one key: cluster
safe), so a trim between the two cannot hide a hole. ``MAXLEN`` trimming removes the oldest
entries, so events after a position were lost when the position lies before the first retained
entry and the stream ever lost entries (``entries-added`` > ``length``, Redis 7). A position on
the very last trimmed entry is reported as a gap too: the stream cannot tell that case apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from dtq_core.infra.connection import StreamEntry
from dtq_event_gateway.cursor import START, Position

PAGE = 500


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What ``XINFO STREAM`` says about retention."""

    first: Position | None
    """The first retained entry; ``None`` when the stream is empty."""
    last: Position
    """The last id the stream generated (also when that entry is gone)."""
    deleted: int | None
    """Entries the stream ever lost (trimmed or deleted); ``None`` before Redis 7."""

    @classmethod
    def parse(cls, info: dict[str, Any]) -> StreamInfo:
        first = info.get("first-entry")
        added = info.get("entries-added")
        return cls(
            first=Position.of_entry(first[0]) if first else None,
            last=Position.of_entry(info["last-generated-id"]),
            deleted=None if added is None else int(added) - int(info["length"]),
        )


@dataclass(frozen=True, slots=True)
class Gap:
    reason: str
    """``retention``: trimmed before the client read it; ``reset``: the stream was deleted or
    recreated (a flushed or restored Redis)."""
    resume: Position
    """Where the client continues from."""


def check(position: Position, info: StreamInfo | None) -> Gap | None:
    """Whether events after ``position`` are gone from the stream (pure)."""
    if info is None:
        return Gap("reset", START) if position > START else None
    if Position(position.ms, position.seq) > info.last:
        return Gap("reset", START)
    if info.deleted == 0:
        return None
    if info.first is None:
        return Gap("retention", info.last) if info.last > position else None
    resume = Position(info.first.ms, info.first.seq, 0)
    return Gap("retention", resume) if resume > position else None


async def read_page(
    redis: aioredis.Redis, key: str, position: Position
) -> tuple[StreamInfo | None, list[StreamEntry]]:
    """The stream's retention facts and up to :data:`PAGE` entries from ``position`` on.

    The entry ``position`` points into is included when it was delivered only in part.
    """
    if position == START:
        low = "-"
    elif position.complete:
        low = "(" + position.entry_id
    else:
        low = position.entry_id
    async with redis.pipeline(transaction=True) as pipe:
        await pipe.xinfo_stream(key)
        await pipe.xrange(key, min=low, max="+", count=PAGE)
        info, entries = await pipe.execute(raise_on_error=False)
    if isinstance(info, ResponseError):
        if "no such key" not in str(info).lower():
            raise info
        return None, []
    if isinstance(info, BaseException):
        raise info
    if isinstance(entries, BaseException):
        raise entries
    return StreamInfo.parse(info), cast(list[StreamEntry], entries)
