"""What a page keeps: the filters a caller gives (checked before any read), and whether a
``task.queued`` entry is the submit of its task or a later promotion (see
:mod:`dtq_core.ops.browse`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import redis.asyncio as aioredis

from dtq_core.errors import ValidationError
from dtq_core.infra.connection import StreamEntry
from dtq_core.messages import TaskStatus, TaskSummary
from dtq_core.ops.browse.summaries import read_summaries
from dtq_core.ops.browse.walk import _Candidate
from dtq_core.protocol.submit import check_name

LIST_LIMIT_MAX = 500
"""Largest page of tasks."""

SUBMIT_WINDOW_MS = 50
"""A ``task.queued`` entry written this long after the record's creation is not a submit. A
submit script writes its event entry a few ms after it reads the time (about 5 ms for a batch
of 500), so this leaves a wide margin."""

LOOKBACK_MAX = 1000
"""Entries read when checking that a ``task.queued`` entry is a submit (those written within
``SUBMIT_WINDOW_MS`` before it)."""


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
