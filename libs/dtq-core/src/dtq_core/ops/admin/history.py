"""The per-minute history of the queues: ``GET /stats/history``, ``dtq stats`` and the
dashboard's charts read it; the scheduler leader notes the depths in it.

What is counted and where it lives is :mod:`dtq_core.protocol.history`. A read takes the
windows of the range for every stored queue asked for (one ``HGETALL`` each, all in one
pipeline: 7 per stored queue for an hour, 145 for a day) and adds the partitions of a queue,
and the queues when none is named, into one column per figure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Annotated, Any, cast

import msgspec
from msgspec import Meta

from dtq_core.client import Client
from dtq_core.infra.connection import answering, server_ms
from dtq_core.ops.admin.base import AdminPart
from dtq_core.ops.admin.stats import QueueStats, QueueStatsReader
from dtq_core.ops.audit import AuditWriter
from dtq_core.protocol.history import MINUTE_S, Columns, Metric, minute_of, windows
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.scripts import Scripts


class HistoryRange(StrEnum):
    """How far back a history read goes, up to the current minute (included)."""

    HOUR = "1h"
    SIX_HOURS = "6h"
    DAY = "24h"

    @property
    def minutes(self) -> int:
        return {"1h": 60, "6h": 360, "24h": 1440}[self.value]


def _doc(text: str) -> Meta:
    return Meta(description=text)


class QueueHistory(msgspec.Struct, frozen=True, kw_only=True):
    """Per-minute figures of one queue (its partitions added up) or of every queue, oldest
    minute first: item ``k`` of every list is the minute starting at ``start_ms + k *
    step_s * 1000``. The last minute is the current one, counted up to ``as_of_ms``."""

    range: HistoryRange
    queue: Annotated[
        str | None, _doc("The queue asked for; null: every registered queue, added up.")
    ]
    queues: Annotated[list[str], _doc("The queues whose figures are included.")]
    step_s: Annotated[int, _doc("Seconds per item: a minute.")] = MINUTE_S
    start_ms: Annotated[int, _doc("The first minute's start (Redis time, ms since 1970).")]
    as_of_ms: Annotated[
        int,
        _doc(
            "When the figures were read (Redis time, ms since 1970): an event after it is not "
            "counted in them."
        ),
    ]
    submitted: Annotated[list[int], _doc("Tasks accepted by a submit (queued or scheduled).")]
    succeeded: Annotated[list[int], _doc("Tasks that succeeded.")]
    retried: Annotated[list[int], _doc("Attempts that failed with attempts left.")]
    failed: Annotated[
        list[int],
        _doc("Tasks that ended dead or failed (a worker lost on their last attempt included)."),
    ]
    expired: Annotated[list[int], _doc("Tasks whose TTL passed before they started.")]
    run_count: Annotated[
        list[int],
        _doc(
            "Attempts ended by their worker (succeeded, retried or failed), whose run times "
            "(claim to outcome) are in run_total_s."
        ),
    ]
    run_total_s: Annotated[
        list[float], _doc("The sum of those run times; the mean is this over run_count.")
    ]
    run_max_s: Annotated[
        list[float | None], _doc("The longest of those run times; null: no attempt ended.")
    ]
    waiting: Annotated[
        list[int | None],
        _doc(
            "Tasks ready to run (waiting in groups included) as the scheduler leader noted "
            "them once in the minute; null: a minute no leader noted."
        ),
    ]
    in_flight: Annotated[list[int | None], _doc("Tasks running, as noted (null: not noted).")]
    delayed: Annotated[
        list[int | None], _doc("Tasks scheduled or retrying, as noted (null: not noted).")
    ]


class HistoryReader(AdminPart):
    """Reads the per-minute history and notes the depths in it."""

    def __init__(self, client: Client, audit_writer: AuditWriter, stats: QueueStatsReader) -> None:
        super().__init__(client, audit_writer)
        self._stats = stats
        self._scripts = Scripts(client.redis)

    @answering
    async def history(
        self, span: HistoryRange | str = HistoryRange.HOUR, queue: str | None = None
    ) -> QueueHistory:
        """The per-minute figures of ``queue`` (every registered queue when ``None``) over
        ``span``.

        Raises:
            ValueError: ``span`` is not ``1h``, ``6h`` or ``24h``.
            InvalidNameError: ``queue`` is not a valid queue name.
            QueueNotFoundError: ``queue`` is not known.
        """
        span = HistoryRange(span)
        if queue is None:
            groups = await self._stats.registered()
            names, stored = list(groups), [n for parts in groups.values() for n in parts]
        else:
            names, stored = [queue], [qk.queue for qk in await self._partitions(queue)]
        as_of_ms = await server_ms(self.redis, self.keys.queue(stored[0]).meta if stored else None)
        last = minute_of(as_of_ms)
        first = last - span.minutes + 1
        columns = Columns(first, span.minutes)
        asked = [(name, w) for name in stored for w in windows(first, last)]
        if asked:
            async with self.redis.pipeline(transaction=False) as pipe:
                for name, w in asked:
                    await pipe.hgetall(self.keys.queue(name).history(w))
                replies = await pipe.execute()
            for (_, w), fields in zip(asked, replies, strict=True):
                columns.add(w, cast(dict[str, str], fields))
        return QueueHistory(
            range=span,
            queue=queue,
            queues=names,
            start_ms=first * MINUTE_S * 1000,
            as_of_ms=as_of_ms,
            submitted=columns.counts(Metric.SUBMITTED),
            succeeded=columns.counts(Metric.SUCCEEDED),
            retried=columns.counts(Metric.RETRIED),
            failed=columns.counts(Metric.FAILED),
            expired=columns.counts(Metric.EXPIRED),
            run_count=columns.counts(Metric.RUN_COUNT),
            run_total_s=[v / 1e6 for v in columns.counts(Metric.RUN_TOTAL_US)],
            run_max_s=columns.seconds(Metric.RUN_MAX_US, missing=None),
            waiting=columns.sampled(Metric.WAITING),
            in_flight=columns.sampled(Metric.IN_FLIGHT),
            delayed=columns.sampled(Metric.DELAYED),
        )

    @answering
    async def note_depths(self) -> int:
        """Note every stored queue's depth in the current minute of its history (the
        scheduler leader, once a minute); returns how many were noted. One pipeline of reads
        (:meth:`QueueStatsReader.stored`), one of notes."""
        stats = await self._stats.stored()
        if not stats:
            return 0
        await self._scripts.pipelined(
            [_note(self._scripts, self.keys.queue(s.name), s) for s in stats],
            [self.keys.queue(s.name).meta for s in stats],
        )
        return len(stats)


def _note(scripts: Scripts, qk: QueueKeys, s: QueueStats) -> Callable[[Any], Awaitable[int]]:
    """One queue's note, made on the pipeline :meth:`Scripts.pipelined` gives it."""
    return lambda pipe: scripts.history_depth(
        qk,
        waiting=s.depth + s.waiting_in_groups,
        in_flight=s.in_flight,
        delayed=s.delayed,
        client=pipe,
    )
