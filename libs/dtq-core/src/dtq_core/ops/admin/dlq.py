"""The dead-letter queue: list, requeue, discard and purge (``/queues/{q}/dlq``, ``dtq dlq``).

Every change runs in batches of :data:`~dtq_core.ops.admin.base.BATCH` tasks, so Redis stays
responsive, and its audit entry follows the change (``detail`` names the filter, or the first
:data:`AUDIT_IDS` explicit ids).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator, Sequence

import msgspec

from dtq_core.errors import InvalidStateError, TaskNotFoundError, ValidationError
from dtq_core.infra.connection import answering
from dtq_core.messages import TaskStatus, TaskSummary
from dtq_core.names import split_task_id
from dtq_core.ops.admin.base import BATCH, AdminPart, Entries, _check_actor, _entries
from dtq_core.ops.browse import PageBytes, read_summaries
from dtq_core.protocol.fields import TaskField
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.outcomes import RequeueOutcome
from dtq_core.protocol.submit import check_name

AUDIT_IDS = 20
DLQ_PAGE_MAX = 1000
_STREAM_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}(?:~[1-9][0-9]?)?")
_DLQ_STATES = frozenset({TaskStatus.DEAD.value, TaskStatus.FAILED.value})


class DlqPage(msgspec.Struct, frozen=True, kw_only=True):
    """Dead tasks, newest first, as summaries (with the last error; ``GET /tasks/{id}`` has
    the whole record). Pass ``next_cursor`` back for the next page (``None``: the end)."""

    items: list[TaskSummary]
    next_cursor: str | None = None


def _ids_detail(ids: Sequence[str]) -> str:
    """The audit entry's ``detail`` for explicit ids: the first few, so entries stay small."""
    return "ids=" + ",".join(ids[:AUDIT_IDS]) + (",..." if len(ids) > AUDIT_IDS else "")


def _chunks(items: Sequence[str], size: int = BATCH) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _dead_entries(entries: Entries, task: str | None) -> list[tuple[str, str]]:
    """``(entry id, rand)`` of the DLQ entries that name a task (``t``), only those of task
    name ``task`` when given."""
    return [
        (eid, fields["t"])
        for eid, fields in entries
        if "t" in fields and (task is None or fields.get("task") == task)
    ]


class DeadLetters(AdminPart):
    """Lists a queue's dead tasks and requeues, discards or purges them."""

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
        parts = await self._partitions(queue)
        after = _parse_cursor(cursor)
        # A filter may skip many entries: read more of them per round trip.
        batch = limit + 1 if task is None else max(limit + 1, 500)
        items: list[TaskSummary] = []
        size = PageBytes()
        last: tuple[int, int, int] | None = None
        while True:
            entries, complete_to = await self._dead_below(parts, after, batch)
            wanted = [(pos, rand) for pos, fields in entries for rand in _named(fields, task)]
            summaries = await read_summaries(
                self.redis, [(parts[pos[2]], rand) for pos, rand in wanted]
            )
            for (pos, _), record in zip(wanted, summaries, strict=True):
                if record is None or record.status.value not in _DLQ_STATES:
                    continue  # the record expired, or the task left the DLQ meanwhile
                if len(items) == limit or not size.take(record):
                    return DlqPage(items=items, next_cursor=_cursor(last))
                items.append(record)
                last = pos
            if complete_to is None:
                return DlqPage(items=items)
            after = complete_to

    async def _dead_below(
        self, parts: Sequence[QueueKeys], after: tuple[int, int, int] | None, batch: int
    ) -> tuple[list[tuple[tuple[int, int, int], dict[str, str]]], tuple[int, int, int] | None]:
        """The DLQ entries of every partition below ``after``, newest first, as far as all of
        them are known: ``(position, fields)`` each, a position being ``(ms, seq,
        partition)``, and the last position the merge is complete to (``None``: every
        partition was read to its end)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for k, qk in enumerate(parts):
                await pipe.xrevrange(qk.dlq, max=_upper(after, k), min="-", count=batch)
            replies = await pipe.execute()
        merged: list[tuple[tuple[int, int, int], dict[str, str]]] = []
        complete_to: tuple[int, int, int] | None = None
        for k, reply in enumerate(replies):
            entries = _entries(reply)
            merged.extend((_position(eid, k), fields) for eid, fields in entries)
            if len(entries) == batch:
                # This partition has more below its last entry: the merge is only complete
                # down to there.
                edge = _position(entries[-1][0], k)
                complete_to = edge if complete_to is None else max(complete_to, edge)
        merged.sort(key=lambda item: item[0], reverse=True)
        if complete_to is not None:
            merged = [item for item in merged if item[0] >= complete_to]
        return merged, complete_to

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
        parts = await self._partitions(queue)
        count = 0
        if ids:
            for qk, rands in (await self._dead_rands(queue, parts, ids)).items():
                for chunk in _chunks(rands):
                    count += (await self._requeue(qk, chunk)).count(RequeueOutcome.REQUEUED)
            detail = _ids_detail(ids)
        else:
            for qk in parts:
                async for batch in self._dlq_batches(qk, task):
                    count += (await self._requeue(qk, [rand for _, rand in batch])).count(
                        RequeueOutcome.REQUEUED
                    )
            detail = "all" if task is None else f"task={task}"
        await self._audit("dlq.requeue", queue, actor, count, detail)
        return count

    async def _requeue(self, qk: QueueKeys, rands: Sequence[str]) -> list[str]:
        return await self.client.scripts.requeue(
            qk,
            rands,
            events_maxlen=self.settings.queues.events_maxlen,
            retention_ms=self.settings.tasks.retention_s * 1000,
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
        parts = await self._partitions(queue)
        count = 0
        for qk, rands in (await self._dead_rands(queue, parts, ids)).items():
            for chunk in _chunks(rands):
                count += await self.client.scripts.discard(
                    qk, chunk, events_maxlen=self.settings.queues.events_maxlen
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
        count = 0
        for qk in await self._partitions(queue):
            count += await self._purge_dlq(qk)
        await self._audit("dlq.purge", queue, actor, count)
        return count

    async def _purge_dlq(self, qk: QueueKeys) -> int:
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
                    qk, live, events_maxlen=self.settings.queues.events_maxlen
                )
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
            chunk = _dead_entries(entries, task)
            if chunk:
                yield chunk
            if len(entries) < BATCH:
                return
            lower = f"({entries[-1][0]}"

    async def _dead_rands(
        self, queue: str, parts: Sequence[QueueKeys], ids: Sequence[str]
    ) -> dict[QueueKeys, list[str]]:
        """Validate user-given task ids: each a dead (or failed) task of this queue (of any
        of its partitions). Returns the random parts by partition."""
        by_name = {qk.queue: qk for qk in parts}
        found: list[tuple[str, QueueKeys, str]] = []
        for task_id in dict.fromkeys(ids):
            split = split_task_id(task_id)
            if split is None:
                raise ValidationError(
                    f"{task_id!r} is not a task id: expected <queue>:<32 hex digits>",
                    field="ids",
                )
            qk = by_name.get(split[0])
            if qk is None:
                raise TaskNotFoundError(
                    f"task {task_id} is not in queue {queue!r}", task_id=task_id
                )
            found.append((task_id, qk, split[1]))
        async with self.redis.pipeline(transaction=False) as pipe:
            for _, qk, rand in found:
                await pipe.hget(qk.task(rand), TaskField.STATUS)
            states = await pipe.execute()
        out: dict[QueueKeys, list[str]] = {}
        for (task_id, qk, rand), state in zip(found, states, strict=True):
            if state is None:
                raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
            if state not in _DLQ_STATES:
                raise InvalidStateError(
                    f"task {task_id} is {state}, not dead: it is not in the dead-letter queue",
                    task_id=task_id,
                    status=state,
                )
            out.setdefault(qk, []).append(rand)
        return out


def _named(fields: dict[str, str], task: str | None) -> list[str]:
    """The rand of a DLQ entry that names a task (``t``) of name ``task`` (any when None)."""
    if "t" in fields and (task is None or fields.get("task") == task):
        return [fields["t"]]
    return []


def _position(entry_id: str, partition: int) -> tuple[int, int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq), partition


def _upper(after: tuple[int, int, int] | None, partition: int) -> str:
    """The XREVRANGE upper bound of ``partition`` below the position ``after``: positions
    order by entry id, then partition, so a lower partition may still hold ``after``'s id."""
    if after is None:
        return "+"
    ms, seq, k = after
    return f"{ms}-{seq}" if partition < k else f"({ms}-{seq}"


def _cursor(pos: tuple[int, int, int] | None) -> str | None:
    """The cursor after ``pos``: the entry id, and ``~k`` for partition k of a partitioned
    queue (an id alone is partition 0, so cursors of a queue that grew stay valid)."""
    if pos is None:
        return None
    ms, seq, k = pos
    return f"{ms}-{seq}" + (f"~{k}" if k else "")


def _parse_cursor(cursor: str | None) -> tuple[int, int, int] | None:
    if cursor is None:
        return None
    entry_id, _, k = cursor.partition("~")
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq), int(k or 0)
