"""Reading tasks: a task's record by id, and a wait for its outcome that holds no pooled
connection (see :mod:`dtq_core.protocol.waits`)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis

from dtq_core.errors import TaskNotFoundError
from dtq_core.handles import outcome_of
from dtq_core.infra.connection import StreamEntry, answering, server_ms
from dtq_core.messages import Outcome, TaskRecord, TaskStatus, Waiting
from dtq_core.names import split_task_id
from dtq_core.protocol.fields import MetaField
from dtq_core.protocol.keys import GROUP, Keys, QueueKeys
from dtq_core.protocol.records import TASK_FIELDS, decode_record
from dtq_core.protocol.waits import EventWaiter

_WAITING = frozenset({TaskStatus.QUEUED, TaskStatus.SCHEDULED, TaskStatus.RETRYING})


class TaskReader:
    """Looks tasks up by id and waits for their outcomes, for one client."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, trace_url: str = "") -> None:
        self.redis = redis
        self.keys = keys
        self.trace_url = trace_url
        """``DTQ_TRACE_URL``: records link to their trace with it."""
        self._waiter: EventWaiter | None = None

    @property
    def waiter(self) -> EventWaiter:
        """The one reader of event streams behind every :meth:`wait` (made on first use; its
        connection is not one of the pool's)."""
        if self._waiter is None:
            self._waiter = EventWaiter(self.redis)
        return self._waiter

    async def aclose(self) -> None:
        """Stop the waits' reader and close its connection."""
        if self._waiter is not None:
            await self._waiter.aclose()
            self._waiter = None

    def locate(self, task_id: str) -> tuple[QueueKeys, str]:
        """The keys of the task's queue and the random part of its id.

        Raises:
            TaskNotFoundError: ``task_id`` is not a dtq task id.
        """
        parts = split_task_id(task_id)
        if parts is None:
            raise TaskNotFoundError(f"{task_id!r} is not a dtq task id", task_id=task_id)
        return self.keys.queue(parts[0]), parts[1]

    @answering
    async def get(self, task_id: str) -> TaskRecord | None:
        """The task record, or ``None`` when no such task exists (or its record expired); a
        task that has not started says why it waits (one more round trip)."""
        record = await self._record(task_id)
        if record is None or record.status not in _WAITING:
            return record
        qk, rand = self.locate(task_id)
        return msgspec.structs.replace(record, waiting=await self._waiting(qk, rand, record))

    async def _record(self, task_id: str) -> TaskRecord | None:
        """The record alone (what a wait reads: one round trip)."""
        try:
            qk, rand = self.locate(task_id)
        except TaskNotFoundError:
            return None
        values = await self.redis.hmget(qk.task(rand), list(TASK_FIELDS))
        return decode_record(qk.queue, rand, cast(list[str | None], values), self.trace_url)

    async def _waiting(self, qk: QueueKeys, rand: str, record: TaskRecord) -> Waiting:
        """Why ``record`` (a task that has not started) waits: one round trip to its slot."""
        if record.status is not TaskStatus.QUEUED:
            return Waiting(reason="scheduled", until=record.scheduled_for)
        group = record.group
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.hmget(
                qk.meta,
                [
                    MetaField.PAUSED,
                    MetaField.LIMIT_CONCURRENCY,
                    MetaField.LIMIT_INTERVAL,
                    MetaField.LIMIT_BURST,
                    MetaField.LIMIT_GROUP_CONCURRENCY,
                ],
            )
            await pipe.get(qk.rate)
            if group is not None:
                g = qk.group(group)
                await pipe.zrank(f"{g}:w", rand)  # None: in a stream, not waiting in its group
                await pipe.hget(qk.groups_settings, group)
                await pipe.scard(f"{g}:r")
                await pipe.zscore(qk.groups_due, group)
            for stream in qk.streams:
                await pipe.xpending(stream, GROUP)
            meta, tat, *rest = await pipe.execute(raise_on_error=False)
        paused, concurrency, interval, burst, group_limit = meta
        if paused == "1":
            return Waiting(reason="queue_paused")
        pending = rest[4:] if group is not None else rest
        if group is not None and rest[0] is not None:
            # TIME cannot go in a cluster pipeline: Redis time is read only when a group rate
            # holds the group.
            now_ms = await server_ms(self.redis, qk.meta) if rest[3] is not None else 0
            return _group_waiting(group, [*rest[:4], now_ms], group_limit)
        if concurrency is not None:
            used = sum(p["pending"] for p in pending if isinstance(p, dict))
            if used >= int(concurrency):
                return Waiting(
                    reason="queue_concurrency_full", detail=f"{used}/{concurrency} running"
                )
        if interval is not None and tat is not None:
            now_us = await server_ms(self.redis, qk.meta) * 1000
            # The next start is allowed once now + burst * interval - tat >= interval.
            next_us = int(tat) - (int(burst or 1) - 1) * int(interval)
            if next_us > now_us:
                return Waiting(
                    reason="rate_limited", until=datetime.fromtimestamp(next_us / 1e6, tz=UTC)
                )
        return Waiting(reason="ready")

    @answering
    async def wait(self, task_id: str, timeout: float | None = None) -> Outcome[Any]:
        """Wait for the task's outcome without polling and without holding a connection.

        The wait is registered with the client's one reader of the event streams
        (:class:`~dtq_core.protocol.waits.EventWaiter`), which wakes it when the task's terminal
        event is written; only the short reads of the stream's tail and the record use the pool.

        Raises:
            TaskNotFoundError: no such task.
            TimeoutError: not finished within ``timeout`` seconds.
        """
        qk, rand = self.locate(task_id)
        if timeout is not None and timeout <= 0:  # a look, not a wait: no reader needed
            record = await self._record(task_id)
            if record is None:
                raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
            if record.status.terminal:
                return outcome_of(record)
            raise TimeoutError(f"task {task_id} did not finish within {timeout} s")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Read the stream's tail first, then the record: an outcome written in between
            # comes after the tail, so the reader finds it, never misses it.
            tail = cast(list[StreamEntry], await self.redis.xrevrange(qk.events, count=1))
            since = tail[0][0] if tail else "0-0"
            async with self.waiter.watch(qk.events, rand, since) as ended:
                record = await self._record(task_id)
                if record is None:
                    raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
                if record.status.terminal:
                    return outcome_of(record)
                remaining = None if deadline is None else deadline - time.monotonic()
                try:
                    async with asyncio.timeout(remaining):
                        await ended
                except TimeoutError:
                    raise TimeoutError(
                        f"task {task_id} did not finish within {timeout} s"
                    ) from None
            # A terminal event: read the record again (a retry may have requeued it since).


def _group_waiting(group: str, replies: list[Any], limit: str | None) -> Waiting:
    """Why a task waiting in its group waits, from the reads of :meth:`TaskReader._waiting`:
    its rank in the group, the group's settings, its running count, its rate's due time and
    the server's time (ms)."""
    ahead, settings, running, due_ms, now_ms = replies
    if settings is not None and settings.endswith("p"):
        return Waiting(reason="group_paused", detail=f"group {group}")
    if limit is not None and running >= int(limit):
        return Waiting(
            reason="group_concurrency_full", detail=f"group {group}: {running}/{limit} running"
        )
    if due_ms is not None and due_ms > now_ms:
        return Waiting(
            reason="group_rate_limited",
            until=datetime.fromtimestamp(due_ms / 1000, tz=UTC),
            detail=f"group {group}",
        )
    return Waiting(
        reason="group_turn",
        detail=f"group {group}: its turn comes after {ahead} more of the group's tasks",
    )
