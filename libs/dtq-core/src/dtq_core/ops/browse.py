"""Recent tasks, newest first, for ``GET /api/v1/tasks`` (there is no task index to query).

The list is read from each queue's lifecycle event stream (``QueueKeys.events``), walked
backwards with ``XREVRANGE``. A submit writes one ``task.queued`` entry (or ``task.scheduled``
for a delayed task) holding the whole batch's ids; those entries are the list's rows, and the
task records are read with one pipelined ``HMGET`` per page. Several queues are merged newest
first by stream id (ties broken by queue name, then by position inside the entry).

What the list covers: only what the event streams retain, the last ~``DTQ_EVENTS_MAXLEN``
entries per queue, and only tasks whose record still exists (see the retention table in
``docs/task-lifecycle.md``). A page bounds its work: it examines at most ``SCAN_FACTOR × limit``
event entries and task ids; when it reaches that bound before ``limit`` matches, it returns
what it found (possibly nothing) and a ``next_cursor`` that continues the walk.

The promotion of a delayed or retrying task also writes a ``task.queued`` entry, with the same
fields as a submit's (a requeue's entry carries a ``reason`` and is skipped). A ``task.queued``
entry is taken as the submit only when it was written within ``SUBMIT_WINDOW_MS`` of the
record's creation and no older entry of that short span names the task; a page also never
lists a task twice.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import re
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import cast

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from dtq_core.client import Client
from dtq_core.errors import ValidationError
from dtq_core.infra.connection import StreamEntry, answering
from dtq_core.messages import TaskStatus, TaskSummary
from dtq_core.protocol.fields import TaskField
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.records import BODY_FIELDS, ERRORS_READ_MAX, SUMMARY_FIELDS, decode_summary
from dtq_core.protocol.submit import check_name

LIST_LIMIT_MAX = 500
"""Largest page of tasks."""

PAGE_BYTES_MAX = 512 * 1024
"""A page (of tasks, or of the DLQ) stops before the item that would take its encoded items
past this size, and returns the cursor of the last item it holds. Summaries are about 0.5-1
KB, so the cap only bites on pages with long error messages; it bounds the answer whatever
the items hold."""

SCAN_FACTOR = 20
"""A page examines at most this many event entries and task ids per requested row."""

SUBMIT_WINDOW_MS = 50
"""A ``task.queued`` entry written this long after the record's creation is not a submit. A
submit script writes its event entry a few ms after it reads the time (about 5 ms for a batch
of 500), so this leaves a wide margin."""

LOOKBACK_MAX = 1000
"""Entries read when checking that a ``task.queued`` entry is a submit (those written within
``SUBMIT_WINDOW_MS`` before it)."""

READ_CHUNK = 200
"""Event entries read per ``XREVRANGE`` of one queue."""

_SUBMIT_TYPES = frozenset({"task.queued", "task.scheduled"})
_CURSOR_VERSION = "1"
_CURSOR_RE = re.compile(
    r"1\|([0-9]{1,20})-([0-9]{1,20})\|([A-Za-z0-9][A-Za-z0-9_.-]{0,63})\|([0-9]{1,4})"
)
_CURSOR_MAX = 200
_ERR = BODY_FIELDS.index(TaskField.ERRORS)


class TaskPage(msgspec.Struct, frozen=True, kw_only=True):
    """Tasks, newest first, as summaries (``GET /tasks/{id}`` has a task's arguments, result
    and errors). Pass ``next_cursor`` back for the next page (``None``: the end)."""

    items: list[TaskSummary]
    next_cursor: str | None = None


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


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A place in the merged walk; the walk goes from larger positions to smaller ones.

    ``index`` is the position of a task id inside its entry (0 for entries that are not
    submits), so a page can end in the middle of a batch.
    """

    ms: int
    seq: int
    queue: str
    index: int


def encode_cursor(pos: Position) -> str:
    raw = f"{_CURSOR_VERSION}|{pos.ms}-{pos.seq}|{pos.queue}|{pos.index}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """Parse a cursor made by :func:`encode_cursor`.

    Raises:
        ValidationError: anything else (it is never passed to Redis as it is).
    """
    invalid = ValidationError(
        f"cursor {cursor[:_CURSOR_MAX]!r} is invalid: pass next_cursor of the previous page",
        field="cursor",
    )
    if not cursor or len(cursor) > _CURSOR_MAX:
        raise invalid
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise invalid from None
    match = _CURSOR_RE.fullmatch(raw)
    if match is None:
        raise invalid
    ms, seq, queue, index = match.groups()
    return Position(int(ms), int(seq), queue, int(index))


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


def _created_ms(candidate: _Candidate, summary: TaskSummary | None) -> int | None:
    """The record's creation time in ms when the candidate's entry may be the submit's (and
    needs the look back of :func:`_lookup`); ``None`` when it cannot be."""
    if summary is None:
        return None
    created = summary.created_at
    ms = int(created.timestamp()) * 1000 + created.microsecond // 1000
    return ms if -1 <= candidate.pos.ms - ms <= SUBMIT_WINDOW_MS else None


def _check(
    *, queue: str | None, status: TaskStatus | str | None, task: str | None, limit: int
) -> TaskStatus | None:
    size: object = limit  # not type-checked when called from Python
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= LIST_LIMIT_MAX:
        raise ValidationError(
            f"limit must be an integer from 1 to {LIST_LIMIT_MAX}, got {limit!r}", field="limit"
        )
    if queue is not None:
        check_name("queue", queue)
    if task is not None:
        check_name("task", task)
    if status is None:
        return None
    try:
        return TaskStatus(status)
    except ValueError:
        raise ValidationError(
            f"status {status!r} is not a task status; one of: "
            + ", ".join(s.value for s in TaskStatus),
            field="status",
        ) from None


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
        names = [queue]
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


async def _lookup(
    redis: aioredis.Redis, batch: Sequence[_Candidate]
) -> list[tuple[_Candidate, TaskSummary | None]]:
    """The summaries of ``batch``: ``None`` for expired records and for entries that are
    promotions rather than submits. The summaries' round trips, then the look back."""
    if not batch:
        return []
    summaries = await read_summaries(redis, [(c.qk, c.rand) for c in batch])
    # A task.queued entry is the submit only if no older entry names the task: look at the
    # entries from the record's creation to this one (a few ms; one read per entry).
    lookback: dict[tuple[str, str], int] = {}
    maybe: set[int] = set()
    for i, (c, summary) in enumerate(zip(batch, summaries, strict=True)):
        created = _created_ms(c, summary) if c.submit_type == "task.queued" else None
        if created is not None:
            maybe.add(i)
            key = (c.qk.events, f"{c.pos.ms}-{c.pos.seq}")
            lookback[key] = min(created, lookback.get(key, created))
    earlier: dict[tuple[str, str], set[str]] = {}
    if lookback:
        async with redis.pipeline(transaction=False) as pipe:
            for (events, entry_id), created in lookback.items():
                await pipe.xrange(
                    events, min=f"{created - 1}", max=f"({entry_id}", count=LOOKBACK_MAX
                )
            for key, entries in zip(lookback, await pipe.execute(), strict=True):
                earlier[key] = {
                    rand
                    for _, fields in cast(list[StreamEntry], entries)
                    for rand in fields.get("ids", "").split(",")
                }
    out: list[tuple[_Candidate, TaskSummary | None]] = []
    for i, (c, summary) in enumerate(zip(batch, summaries, strict=True)):
        submit = c.submit_type == "task.scheduled" or (
            i in maybe and c.rand not in earlier[(c.qk.events, f"{c.pos.ms}-{c.pos.seq}")]
        )
        out.append((c, summary if submit else None))
    return out
