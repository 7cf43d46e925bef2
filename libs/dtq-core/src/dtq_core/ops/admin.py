"""Operator operations: one implementation shared by the REST API and the ``dtq`` CLI.

Queue statistics, pause and resume, purge, the dead-letter queue and the worker registry.
Every operation that changes state appends an entry to the audit stream (``Keys.audit``:
fields ``action``, ``queue``, ``actor``, ``count``, ``ts`` in server microseconds, and
``detail`` when the operation had a filter or explicit ids).

Numbers come from Redis, never from counting by hand: the depth of a priority stream is its
consumer group's ``lag`` (streams are trimmed lazily, so ``XLEN`` over-counts; when Redis
cannot tell the lag, the entries above the group's last-delivered id are counted, as the submit
script's admission control does), in flight is the group's ``pending``, delayed is the delayed
set's size and dead is the DLQ stream's length.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar, cast

import msgspec
import structlog
from redis.exceptions import ResponseError

from dtq_core.client import Client, queue_limit
from dtq_core.errors import (
    InvalidStateError,
    QueueNotEmptyError,
    QueueNotFoundError,
    TaskNotFoundError,
    ValidationError,
)
from dtq_core.infra.connection import answering
from dtq_core.messages import TaskStatus, TaskSummary, micros_to_datetime
from dtq_core.names import PRIORITIES, split_task_id
from dtq_core.ops import audit as audit_log
from dtq_core.ops.audit import Stamp
from dtq_core.ops.browse import PageBytes, read_summaries
from dtq_core.protocol.keys import GROUP, QueueKeys
from dtq_core.protocol.submit import check_name
from dtq_core.protocol.workers import WorkerRecord

log = structlog.get_logger()

P = ParamSpec("P")
R = TypeVar("R")


BATCH = 100
"""Tasks per script call: about a millisecond of Redis time, so other clients never stall."""

COUNT_PAGE = 1000
"""Entries per read when a stream's undelivered entries must be counted one by one."""

AUDIT_IDS = 20
DLQ_PAGE_MAX = 1000
STALE_HEARTBEATS = 3
"""A worker whose heartbeat is older than this many intervals is shown as ``stale`` (the
same bound as its registry hash's TTL)."""

_STREAM_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
_DLQ_STATES = frozenset({TaskStatus.DEAD.value, TaskStatus.FAILED.value})
_ACTOR_MAX = 128


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


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One worker process of the registry, as ``GET /workers`` shows it."""

    id: str
    host: str | None
    pid: int | None
    queues: list[str]
    concurrency: int
    in_flight: int
    processed: int
    failed: int
    started_at: datetime | None
    last_heartbeat: datetime
    heartbeat_age_s: float
    state: str
    """``running`` or ``draining`` as the worker reports it, or ``stale`` when its heartbeat
    is older than three heartbeat intervals."""
    version: str | None


class DlqPage(msgspec.Struct, frozen=True, kw_only=True):
    """Dead tasks, newest first, as summaries (with the last error; ``GET /tasks/{id}`` has
    the whole record). Pass ``next_cursor`` back for the next page (``None``: the end)."""

    items: list[TaskSummary]
    next_cursor: str | None = None


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
        # remain (RELIABILITY on XINFO); XLEN would count delivered entries the lazy trim has
        # not dropped yet, so the undelivered ones are counted (as the submit script does).
        return _Stream(None, pending, after)
    return _Stream(int(lag), pending, after if int(lag) else None)


def _entry_ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


Entries = list[tuple[str, dict[str, str]]]


def _entries(reply: Any) -> Entries:
    """Stream entries as this module's clients decode them (``decode_responses=True``)."""
    return cast(Entries, reply or [])


def _ids_detail(ids: Sequence[str]) -> str:
    """The audit entry's ``detail`` for explicit ids: the first few, so entries stay small."""
    return "ids=" + ",".join(ids[:AUDIT_IDS]) + (",..." if len(ids) > AUDIT_IDS else "")


def _chunks(items: Sequence[str], size: int = BATCH) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Admin:
    """Operator operations on a dtq deployment, through an SDK :class:`Client`.

    Example::

        admin = Admin(client)
        for stats in await admin.queues():
            print(stats.name, stats.depth)
        await admin.pause("emails", actor="alice")
    """

    def __init__(
        self, client: Client, *, request_id: Callable[[], str | None] | None = None
    ) -> None:
        """Args:
        client: the SDK client whose connection and settings are used.
        request_id: returns the id of the request being served, written into every audit
            entry (the REST API passes its request id, so the audit and its logs join).
        """
        self.client = client
        self._request_id = request_id
        self.redis = client.redis
        self.settings = client.settings
        self.keys = client.keys

    # -- queues ---------------------------------------------------------------------------

    @answering
    async def queues(self) -> list[QueueStats]:
        """Statistics of every registered queue, sorted by name (two round trips in all)."""
        names = sorted(cast(set[str], await self.redis.smembers(self.keys.queues)))
        return await self._stats(names)

    @answering
    async def queue(self, name: str) -> QueueStats:
        """Statistics of one queue.

        Raises:
            InvalidNameError: ``name`` is not a valid queue name.
            QueueNotFoundError: no task was ever submitted to it.
        """
        await self._known(name)
        (stats,) = await self._stats([name])
        return stats

    async def _known(self, name: str) -> QueueKeys:
        check_name("queue", name)
        if not await self.redis.sismember(self.keys.queues, name):
            raise QueueNotFoundError(
                f"queue {name!r} is not known: no worker serving it has started and no admin "
                "created it",
                queue=name,
            )
        return self.keys.queue(name)

    @answering
    async def create_queue(self, name: str, *, actor: str = "cli") -> bool:
        """Register ``name`` in the queue registry, so that submits into it are accepted
        before a worker serving it has started.

        Returns:
            True when it was created, False when it existed already (nothing changed).

        Raises:
            InvalidNameError: ``name`` is not a valid queue name.
            QueueLimitError: the registry holds DTQ_MAX_QUEUES queues.
        """
        _check_actor(actor)
        check_name("queue", name)
        if await self.redis.sismember(self.keys.queues, name):
            return False
        limit = self.settings.max_queues
        (ok,) = await self.client.scripts.register_queues(self.keys.queues, [name], limit)
        if not ok:
            raise queue_limit(name, limit)
        await self._audit("queue.create", name, actor, 0)
        return True

    @answering
    async def delete_queue(self, name: str, *, actor: str = "cli") -> None:
        """Delete an empty queue: its keys and its registry entry (records of finished tasks
        stay until their retention ends). A live worker serving it registers it again with
        the next submit into it.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
            QueueNotEmptyError: it holds waiting, running, delayed or dead tasks (nothing
                was deleted).
        """
        _check_actor(actor)
        qk = await self._known(name)
        dropped, (waiting, running, delayed, dead) = await self.client.scripts.drop_queue(qk)
        if not dropped:
            held = [
                what
                for what, n in (
                    ("waiting", waiting),
                    (f"{running} running", running),
                    (f"{delayed} delayed", delayed),
                    (f"{dead} dead", dead),
                )
                if n
            ]
            raise QueueNotEmptyError(
                f"queue {name!r} is not empty ({', '.join(held)} tasks): purge it "
                "(DELETE /api/v1/queues/{q}/tasks) and its dead-letter queue, let running "
                "tasks finish, then delete it",
                queue=name,
            )
        await self.client.scripts.unregister_queue(self.keys.queues, name)
        self.client.forget_queue(name)
        await self._audit("queue.delete", name, actor, 0)

    async def _stats(self, names: Sequence[str]) -> list[QueueStats]:
        per_queue = 3 + 2 * PRIORITIES
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                qk = self.keys.queue(name)
                await pipe.hget(qk.meta, "paused")
                for stream in qk.streams:
                    await pipe.xinfo_groups(stream)
                    await pipe.xlen(stream)
                await pipe.zcard(qk.delayed)
                await pipe.xlen(qk.dlq)
            await pipe.time()
            replies = await pipe.execute(raise_on_error=False)
        seconds, micros = _checked(replies[-1])
        now_ms = int(seconds) * 1000 + int(micros) // 1000
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
            out.append(
                QueueStats(
                    name=name,
                    paused=_checked(chunk[0]) == "1",
                    depth=sum(depth.values()),
                    depth_by_priority=depth,
                    delayed=int(_checked(chunk[-2])),
                    in_flight=sum(s.pending for s in streams),
                    dead=int(_checked(chunk[-1])),
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

    @answering
    async def pause(self, queue: str, *, actor: str = "cli") -> None:
        """Stop workers from starting tasks of ``queue``; running tasks finish.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        await self._set_paused(queue, paused=True, actor=actor)

    @answering
    async def resume(self, queue: str, *, actor: str = "cli") -> None:
        """Let workers start tasks of ``queue`` again.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        await self._set_paused(queue, paused=False, actor=actor)

    async def _set_paused(self, queue: str, *, paused: bool, actor: str) -> None:
        _check_actor(actor)
        qk = await self._known(queue)
        event = "queue.paused" if paused else "queue.resumed"
        action = "queue.pause" if paused else "queue.resume"
        entry = (await self.stamp()).entry(action, queue=queue, actor=actor, count=0)
        # The flag, its event (both in the queue's slot) and the audit entry are one step.
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.hset(qk.meta, "paused", "1" if paused else "0")
            await pipe.xadd(
                qk.events,
                {"type": event, "actor": actor},
                maxlen=self.settings.events_maxlen,
                approximate=True,
            )
            await audit_log.append(pipe, self.keys.audit, entry)
            await pipe.execute()
        audit_log.logged(entry)

    @answering
    async def purge(self, queue: str, *, actor: str = "cli") -> int:
        """Cancel every waiting task of ``queue`` (queued, scheduled, retrying).

        Running tasks are left to finish.

        Returns:
            The number of waiting entries removed.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        _check_actor(actor)
        qk = await self._known(queue)
        total = 0
        while True:
            seen, cancelled = await self.client.scripts.purge(
                qk,
                limit=BATCH,
                events_maxlen=self.settings.events_maxlen,
                retention_ms=self.settings.task_retention_s * 1000,
            )
            if seen == 0:
                break
            total += cancelled
        await self._audit("queue.purge", queue, actor, total)
        return total

    # -- dead-letter queue ------------------------------------------------------------------

    @answering
    async def dlq_list(
        self, queue: str, *, limit: int = 50, cursor: str | None = None, task: str | None = None
    ) -> DlqPage:
        """A page of dead tasks of ``queue``, newest first.

        Args:
            queue: the queue.
            limit: tasks per page, 1 to 1000.
            cursor: ``next_cursor`` of the previous page.
            task: only tasks with this name.

        Raises:
            ValidationError: bad ``limit`` or ``cursor``.
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        if isinstance(limit, bool) or not 1 <= limit <= DLQ_PAGE_MAX:
            raise ValidationError(
                f"limit must be from 1 to {DLQ_PAGE_MAX}, got {limit!r}", field="limit"
            )
        if cursor is not None and _STREAM_ID.fullmatch(cursor) is None:
            raise ValidationError(
                f"cursor {cursor!r} is invalid: pass next_cursor of the previous page",
                field="cursor",
            )
        if task is not None:
            check_name("task", task)
        qk = await self._known(queue)
        upper = "+" if cursor is None else f"({cursor}"
        # A filter may skip many entries: read more of them per round trip.
        batch = limit + 1 if task is None else max(limit + 1, 500)
        items: list[TaskSummary] = []
        size = PageBytes()
        last = ""
        while True:
            entries = _entries(await self.redis.xrevrange(qk.dlq, max=upper, min="-", count=batch))
            if not entries:
                return DlqPage(items=items)
            wanted = [
                (eid, fields["t"])
                for eid, fields in entries
                if "t" in fields and (task is None or fields.get("task") == task)
            ]
            summaries = await read_summaries(self.redis, [(qk, rand) for _, rand in wanted])
            for (eid, _), record in zip(wanted, summaries, strict=True):
                if record is None or record.status.value not in _DLQ_STATES:
                    continue  # the record expired, or the task left the DLQ meanwhile
                if len(items) == limit or not size.take(record):
                    return DlqPage(items=items, next_cursor=last)
                items.append(record)
                last = eid
            if len(entries) < batch:
                return DlqPage(items=items)
            upper = f"({entries[-1][0]}"

    @answering
    async def dlq_requeue(
        self,
        queue: str,
        ids: Sequence[str] | None = None,
        *,
        all: bool = False,
        task: str | None = None,
        actor: str = "cli",
    ) -> int:
        """Run dead tasks again (their attempt budget starts over, the error history stays).

        Give exactly one of ``ids`` (full task ids), ``all=True``, or ``task`` (every dead task
        with this name). With ids, nothing is requeued unless every id is a dead task of
        ``queue``.

        Returns:
            The number of tasks requeued.

        Raises:
            ValidationError: none or several selectors, or a malformed id.
            TaskNotFoundError: an id is not a task of ``queue``.
            InvalidStateError: an id's task is not dead or failed.
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        _check_actor(actor)
        chosen = sum((ids is not None and len(ids) > 0, all, task is not None))
        if chosen != 1:
            raise ValidationError(
                "give exactly one of: task ids, all, or a task name filter", field="ids"
            )
        if task is not None:
            check_name("task", task)
        qk = await self._known(queue)
        count = 0
        if ids:
            for chunk in _chunks(await self._dead_rands(qk, ids)):
                count += (await self._requeue(qk, chunk)).count("requeued")
            detail = _ids_detail(ids)
        else:
            async for batch in self._dlq_batches(qk, task):
                count += (await self._requeue(qk, [rand for _, rand in batch])).count("requeued")
            detail = "all" if task is None else f"task={task}"
        await self._audit("dlq.requeue", queue, actor, count, detail)
        return count

    async def _requeue(self, qk: QueueKeys, rands: Sequence[str]) -> list[str]:
        return await self.client.scripts.requeue(
            qk,
            rands,
            events_maxlen=self.settings.events_maxlen,
            retention_ms=self.settings.task_retention_s * 1000,
        )

    @answering
    async def dlq_discard(self, queue: str, ids: Sequence[str], *, actor: str = "cli") -> int:
        """Delete dead tasks and their DLQ entries; nothing is deleted unless every id is a
        dead task of ``queue``.

        Returns:
            The number of tasks discarded.

        Raises:
            ValidationError: no ids, or a malformed id.
            TaskNotFoundError: an id is not a task of ``queue``.
            InvalidStateError: an id's task is not dead or failed.
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        _check_actor(actor)
        if not ids:
            raise ValidationError("give at least one task id", field="ids")
        qk = await self._known(queue)
        rands = await self._dead_rands(qk, ids)
        count = 0
        for chunk in _chunks(rands):
            count += await self.client.scripts.discard(
                qk, chunk, events_maxlen=self.settings.events_maxlen
            )
        await self._audit("dlq.discard", queue, actor, count, _ids_detail(ids))
        return count

    @answering
    async def dlq_purge(self, queue: str, *, actor: str = "cli") -> int:
        """Delete every dead task of ``queue`` and empty its DLQ.

        Entries whose task record already expired are removed too.

        Returns:
            The number of DLQ entries removed.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        _check_actor(actor)
        qk = await self._known(queue)
        count = 0
        async for chunk in self._dlq_batches(qk, None):
            async with self.redis.pipeline(transaction=False) as pipe:
                for _, rand in chunk:
                    await pipe.exists(qk.task(rand))
                exists = await pipe.execute()
            orphans = [eid for (eid, _), n in zip(chunk, exists, strict=True) if not n]
            live = [rand for (_, rand), n in zip(chunk, exists, strict=True) if n]
            if orphans:
                # A copy whose task record expired: no script can reach it through the task.
                count += int(await self.redis.xdel(qk.dlq, *orphans))
            if live:
                count += await self.client.scripts.discard(
                    qk, live, events_maxlen=self.settings.events_maxlen
                )
        await self._audit("dlq.purge", queue, actor, count)
        return count

    async def _dlq_batches(
        self, qk: QueueKeys, task: str | None
    ) -> AsyncIterator[list[tuple[str, str]]]:
        """``(entry id, rand)`` batches of the DLQ, oldest first, up to the entry that was the
        newest when the walk started (tasks that die meanwhile are left alone)."""
        newest = _entries(await self.redis.xrevrange(qk.dlq, max="+", min="-", count=1))
        if not newest:
            return
        stop = newest[0][0]
        lower = "-"
        while True:
            entries = _entries(await self.redis.xrange(qk.dlq, min=lower, max=stop, count=BATCH))
            chunk = [
                (eid, fields["t"])
                for eid, fields in entries
                if "t" in fields and (task is None or fields.get("task") == task)
            ]
            if chunk:
                yield chunk
            if len(entries) < BATCH:
                return
            lower = f"({entries[-1][0]}"

    async def _dead_rands(self, qk: QueueKeys, ids: Sequence[str]) -> list[str]:
        """Validate user-given task ids: each a dead (or failed) task of this queue."""
        rands: list[str] = []
        for task_id in dict.fromkeys(ids):
            parts = split_task_id(task_id)
            if parts is None:
                raise ValidationError(
                    f"{task_id!r} is not a task id: expected <queue>:<32 hex digits>",
                    field="ids",
                )
            if parts[0] != qk.queue:
                raise TaskNotFoundError(
                    f"task {task_id} is not in queue {qk.queue!r}", task_id=task_id
                )
            rands.append(parts[1])
        async with self.redis.pipeline(transaction=False) as pipe:
            for rand in rands:
                await pipe.hget(qk.task(rand), "st")
            states = await pipe.execute()
        for task_id, state in zip(dict.fromkeys(ids), states, strict=True):
            if state is None:
                raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
            if state not in _DLQ_STATES:
                raise InvalidStateError(
                    f"task {task_id} is {state}, not dead: it is not in the dead-letter queue",
                    task_id=task_id,
                    status=state,
                )
        return rands

    # -- workers ----------------------------------------------------------------------------

    @answering
    async def workers(self) -> list[WorkerInfo]:
        """Every worker of the registry, sorted by id; ages come from Redis time."""
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.zrange(self.keys.workers, 0, -1, withscores=True)
            await pipe.time()
            members, (seconds, micros) = await pipe.execute()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        if not members:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id, _ in members:
                await pipe.hgetall(self.keys.worker(worker_id))
            hashes = await pipe.execute()
        stale_after_s = STALE_HEARTBEATS * self.settings.heartbeat_interval_s
        out: list[WorkerInfo] = []
        for (worker_id, score), h in zip(members, hashes, strict=True):
            age = max(0.0, (now_ms - float(score)) / 1000)
            record = WorkerRecord.from_fields(h)
            out.append(
                WorkerInfo(
                    id=worker_id,
                    host=record.host or None,
                    pid=record.pid or None,
                    queues=list(record.queues),
                    concurrency=record.concurrency,
                    in_flight=record.inflight,
                    processed=record.processed,
                    failed=record.failed,
                    started_at=(
                        micros_to_datetime(str(record.started_at)) if record.started_at else None
                    ),
                    last_heartbeat=datetime.fromtimestamp(float(score) / 1000, tz=UTC),
                    heartbeat_age_s=age,
                    state="stale" if age > stale_after_s else record.state or "running",
                    version=record.version or None,
                )
            )
        return sorted(out, key=lambda w: w.id)

    # -- audit --------------------------------------------------------------------------------

    async def _audit(
        self, action: str, queue: str, actor: str, count: int, detail: str | None = None
    ) -> None:
        await self.audit(action, queue=queue, actor=actor, count=count, detail=detail)

    @answering
    async def audit(
        self,
        action: str,
        *,
        queue: str,
        actor: str,
        count: int,
        detail: str | None = None,
    ) -> None:
        """Append one entry to the audit stream (``Keys.audit``, server time) and log it.

        For changes that are many writes by nature (purges and requeues run in batches, so
        Redis stays responsive) and for callers whose change dtq-core makes in a script of
        its own (cancel, retry): the entry follows the change. A change that is one write
        puts its entry in the same transaction instead (:meth:`stamp`, :mod:`dtq_core.ops.audit`).
        """
        entry = (await self.stamp()).entry(
            action, queue=queue, actor=actor, count=count, detail=detail
        )
        await self.redis.xadd(
            self.keys.audit, entry, maxlen=audit_log.AUDIT_MAXLEN, approximate=True
        )
        audit_log.logged(entry)

    @answering
    async def stamp(self) -> Stamp:
        """The server's time now and the request being served, for the entries of a change
        written in one transaction with it."""
        seconds, micros = await self.redis.time()
        rid = self._request_id() if self._request_id else None
        return Stamp(int(seconds) * 1_000_000 + int(micros), rid or None)


def _check_actor(actor: str) -> None:
    if not actor or len(actor) > _ACTOR_MAX or not actor.isprintable():
        raise ValidationError(
            f"actor must be 1 to {_ACTOR_MAX} printable characters, got {actor!r}",
            field="actor",
        )
