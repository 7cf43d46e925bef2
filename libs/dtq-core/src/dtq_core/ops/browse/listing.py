"""One page of recent tasks: :func:`list_tasks` and the pager that pulls positions from the
walk, looks candidates up and applies the filters."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import cast

import msgspec
import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.infra.connection import answering
from dtq_core.messages import TaskStatus, TaskSummary
from dtq_core.ops.browse.cursor import Position, decode_cursor, encode_cursor
from dtq_core.ops.browse.filters import _check, _lookup
from dtq_core.ops.browse.summaries import PageBytes
from dtq_core.ops.browse.walk import _Candidate, _Reader, _Walk
from dtq_core.partitions import read_layouts

SCAN_FACTOR = 20
"""A page examines at most this many event entries and task ids per requested row."""

READ_CHUNK = 200
"""Event entries read per ``XREVRANGE`` of one queue."""


class TaskPage(msgspec.Struct, frozen=True, kw_only=True):
    """Tasks, newest first, as summaries (``GET /tasks/{id}`` has a task's arguments, result
    and errors). Pass ``next_cursor`` back for the next page (``None``: the end)."""

    items: list[TaskSummary]
    next_cursor: str | None = None


class _Pager:
    """One page: pulls positions from the walk, looks candidates up, applies the filters."""

    def __init__(
        self,
        redis: aioredis.Redis,
        walk: AsyncGenerator[Position | _Candidate, None],
        *,
        limit: int,
        status: TaskStatus | None,
        task: str | None,
    ) -> None:
        self.redis = redis
        self.walk = walk
        self.limit = limit
        self.status = status
        self.task = task
        self.budget = SCAN_FACTOR * limit
        self.bytes = PageBytes()
        self.items: list[TaskSummary] = []
        self.seen: set[tuple[str, str]] = set()
        self.last: Position | None = None
        self.kept: Position | None = None
        """Position of the last item on the page."""

    async def _batch(self) -> tuple[list[_Candidate], bool]:
        """Candidates to look up next (no more than the page still needs), and whether the
        walk ended."""
        batch: list[_Candidate] = []
        async for step in self.walk:
            self.budget -= 1
            if isinstance(step, Position):
                self.last = step
            else:
                self.last = step.pos
                # The entry names each task: a name filter needs no lookup.
                if self.task is None or step.name in (None, self.task):
                    batch.append(step)
            if self.budget <= 0 or len(batch) >= self.limit - len(self.items):
                return batch, False
        return batch, True

    def _matches(self, record: TaskSummary) -> bool:
        return (self.status is None or record.status is self.status) and (
            self.task is None or record.task == self.task
        )

    async def run(self) -> TaskPage:
        while True:
            batch, ended = await self._batch()
            for candidate, record in await _lookup(self.redis, batch):
                key = (candidate.qk.queue, candidate.rand)
                if record is None or key in self.seen:
                    continue
                self.seen.add(key)
                if self._matches(record):
                    if not self.bytes.take(record) and self.kept is not None:
                        return TaskPage(items=self.items, next_cursor=encode_cursor(self.kept))
                    self.items.append(record)
                    self.kept = candidate.pos
                    if len(self.items) == self.limit:
                        return TaskPage(items=self.items, next_cursor=encode_cursor(candidate.pos))
            if ended:
                return TaskPage(items=self.items)
            if self.budget <= 0 and self.last is not None:
                return TaskPage(items=self.items, next_cursor=encode_cursor(self.last))


@answering
async def list_tasks(
    client: Client,
    *,
    queue: str | None = None,
    status: TaskStatus | str | None = None,
    task: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> TaskPage:
    """Recently submitted tasks, newest first, one page at a time.

    Args:
        client: the SDK client whose Redis is read.
        queue: only this queue (default: every registered queue).
        status: only tasks whose current status is this one.
        task: only tasks with this name.
        limit: rows per page, 1 to :data:`LIST_LIMIT_MAX`.
        cursor: ``next_cursor`` of the previous page.

    Returns:
        Up to ``limit`` tasks; see the module docstring for what the walk covers and why a
        page can be short while ``next_cursor`` is set.

    Raises:
        ValidationError: a bad limit, status or cursor.
        InvalidNameError: a bad queue or task name.
        RedisUnavailableError: Redis did not answer.
    """
    wanted = _check(queue=queue, status=status, task=task, limit=limit)
    after = decode_cursor(cursor) if cursor is not None else None
    if queue is not None:
        (layout,) = await read_layouts(client.redis, client.keys, [queue])
        names = layout.names(queue)  # a partitioned queue: every partition
    else:
        names = sorted(cast(set[str], await client.redis.smembers(client.keys.queues)))
    if not names:
        return TaskPage(items=[])
    readers = [_Reader(client.keys.queue(q), rank, after) for rank, q in enumerate(names)]
    chunk = max(1, min(READ_CHUNK, SCAN_FACTOR * limit // len(readers) + 1))
    walk = _Walk(client.redis, readers, chunk).positions()
    try:
        return await _Pager(client.redis, walk, limit=limit, status=wanted, task=task).run()
    finally:
        await walk.aclose()
