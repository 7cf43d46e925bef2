"""Task summaries read in two round trips, and the byte bound of a page (shared by the task
list and the dead-letter queue pages of :mod:`dtq_core.ops.admin.dlq`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import msgspec
import redis.asyncio as aioredis

from dtq_core.messages import TaskSummary
from dtq_core.protocol.fields import TaskField
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.records import BODY_FIELDS, ERRORS_READ_MAX, SUMMARY_FIELDS, decode_summary

PAGE_BYTES_MAX = 512 * 1024
"""A page (of tasks, or of the DLQ) stops before the item that would take its encoded items
past this size, and returns the cursor of the last item it holds. Summaries are about 0.5-1
KB, so the cap only bites on pages with long error messages; it bounds the answer whatever
the items hold."""

_ERR = BODY_FIELDS.index(TaskField.ERRORS)


class PageBytes:
    """What is left of a page's :data:`PAGE_BYTES_MAX`; the first item always fits, so that
    every page moves the walk on."""

    def __init__(self, limit: int | None = None) -> None:
        self.left = PAGE_BYTES_MAX if limit is None else limit
        self.first = True

    def take(self, item: TaskSummary) -> bool:
        """Count ``item`` in and return ``True``, or return ``False`` when it does not fit."""
        size = len(msgspec.json.encode(item)) + 1
        if size > self.left and not self.first:
            return False
        self.left -= size
        self.first = False
        return True


async def read_summaries(
    redis: aioredis.Redis, wanted: Sequence[tuple[QueueKeys, str]]
) -> list[TaskSummary | None]:
    """The summaries of tasks ``(queue keys, rand)``, ``None`` for those whose record is gone.

    One round trip reads the small fields and the size of each body; a second reads the error
    histories of failed tasks that are at most :data:`ERRORS_READ_MAX` long (for the last
    error). Arguments, metadata and results are never read.
    """
    if not wanted:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for qk, rand in wanted:
            key = qk.task(rand)
            await pipe.hmget(key, list(SUMMARY_FIELDS))
            for field in BODY_FIELDS:
                await pipe.hstrlen(key, field)
        replies = await pipe.execute()
    step = 1 + len(BODY_FIELDS)
    rows = [
        (cast(list[str | None], replies[i]), [int(n) for n in replies[i + 1 : i + step]])
        for i in range(0, len(replies), step)
    ]
    readable = [i for i, (_, sizes) in enumerate(rows) if 0 < sizes[_ERR] <= ERRORS_READ_MAX]
    errors: dict[int, str | None] = {}
    if readable:
        async with redis.pipeline(transaction=False) as pipe:
            for i in readable:
                qk, rand = wanted[i]
                await pipe.hget(qk.task(rand), TaskField.ERRORS)
            errors = dict(zip(readable, cast(list[str | None], await pipe.execute()), strict=True))
    return [
        decode_summary(qk.queue, rand, values, sizes, errors.get(i))
        for i, ((qk, rand), (values, sizes)) in enumerate(zip(wanted, rows, strict=True))
    ]
