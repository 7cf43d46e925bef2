"""Reclaim: take back the attempts of workers that stopped heartbeating.

Every worker runs one. An entry idle for the visibility timeout goes back to its queue (or to
the DLQ once its attempt budget is spent); the script is atomic, so reapers of several workers
never take the same entry twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import RETRYABLE
from dtq_core.names import PRIORITIES

if TYPE_CHECKING:
    from dtq_worker.worker import Worker

log = structlog.get_logger()

BUDGET = 100


class Reaper:
    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.cursors = {q.queue: ["0-0"] * PRIORITIES for q in worker.queues}

    @property
    def interval(self) -> float:
        return max(0.05, min(5.0, self.w.settings.worker.visibility_timeout_s / 4))

    async def run(self, stop: asyncio.Event) -> None:
        backoff = Backoff()
        while not stop.is_set():
            delay = self.interval
            try:
                more = await self.sweep()
                backoff.reset()
                if more:
                    delay = 0.0
            except RETRYABLE as exc:
                self.w.metrics.redis_errors.labels("reaper").inc()
                delay = backoff.next()
                log.warning("reclaim_failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay or 0.001)

    async def sweep(self) -> bool:
        """One pass over every queue; True when a cursor did not reach the end."""
        w = self.w
        s = w.settings
        more = False
        for qk in w.queues:
            result = await w.scripts.reclaim(
                qk,
                consumer=w.consumer,
                min_idle_ms=int(s.worker.visibility_timeout_s * 1000),
                budget=BUDGET,
                events_maxlen=s.queues.events_maxlen,
                retention_ms=s.tasks.retention_s * 1000,
                dlq_enabled=s.queues.dlq_enabled,
                dlq_maxlen=s.queues.dlq_maxlen,
                cursors=self.cursors[qk.queue],
            )
            self.cursors[qk.queue] = result.cursors
            more = more or any(c != "0-0" for c in result.cursors)
            q = qk.queue
            if result.requeued:
                w.metrics.reclaimed.labels(q, "requeued").inc(result.requeued)
            if result.buried:
                w.metrics.reclaimed.labels(q, "buried").inc(result.buried)
            if result.lost:
                w.metrics.entry_lost.labels(q).inc(result.lost)
                log.error(
                    "stream_entries_lost",
                    queue=q,
                    count=result.lost,
                    hint="a work stream was trimmed or entries deleted by hand",
                )
            if result.requeued or result.buried:
                log.warning(
                    "leases_reclaimed", queue=q, requeued=result.requeued, buried=result.buried
                )
        return more
