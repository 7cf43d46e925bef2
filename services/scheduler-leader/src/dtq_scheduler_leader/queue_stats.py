"""The leader's queue-gauge duty: read every queue's statistics and the worker registry
every ``DTQ_QUEUE_METRICS_INTERVAL_S`` and hand them to :class:`QueueGauges`.

The reads are :class:`dtq_core.ops.admin.Admin`'s (what ``GET /queues`` and ``GET /workers``
answer): one ``SMEMBERS``, one pipeline of ``XINFO GROUPS``/``XLEN`` per priority stream plus
``ZCARD``/``XLEN``/``HGET`` per queue, one pipeline of single-entry ``XRANGE`` for the oldest
waiting entries, and one ``HGETALL`` per registered worker. No task hash is read and nothing
is scanned.
"""

from __future__ import annotations

from collections import Counter

from dtq_core.ops.admin import Admin
from dtq_scheduler_leader.metrics import QueueGauges, QueueSnapshot

OUTDATED_AFTER_INTERVALS = 3
"""Snapshots older than this many intervals (or 10 s, if longer) are outdated: not exported."""


class QueueStatsRefresher:
    """One duty step: refresh the snapshot, then sleep one interval."""

    def __init__(self, admin: Admin, gauges: QueueGauges, interval_s: float) -> None:
        self.admin = admin
        self.gauges = gauges
        self.interval_s = interval_s

    async def step(self) -> float:
        queues = await self.admin.queues()
        workers = Counter(w.state for w in await self.admin.workers())
        self.gauges.snapshot = QueueSnapshot(queues=queues, workers=workers)
        return self.interval_s

    @property
    def max_age_s(self) -> float:
        return max(OUTDATED_AFTER_INTERVALS * self.interval_s, 10.0)
