"""Reclaim: take back the attempts of workers that stopped heartbeating.

Every worker runs one. An entry idle for the visibility timeout goes back to its queue (or to
the DLQ once its attempt budget is spent); the script is atomic, so the reclaimers of several
workers never take the same entry twice. (The scheduler's stale-worker sweeper is another
duty: it removes dead workers from the registry.)

The cost follows the activity: a queue whose pending lists were empty when it was last looked
at cannot hold a reclaimable entry before a whole visibility timeout has passed (an entry
delivered since must be idle that long), so it is looked at again only then (a little sooner,
at random, so that queues found empty together spread out), instead of every pass. A worker
serving many idle queues then sends one reclaim call per queue per visibility timeout, each
one ``XPENDING`` per stream, :data:`PIPELINE` calls to a round trip (docs/testing.md, G5).
"""

from __future__ import annotations

import asyncio
import random
import time

import structlog

from dtq_core.infra.loops import run_supervised
from dtq_core.names import PRIORITIES, logical_queue
from dtq_core.protocol.scripts import ReclaimResult
from dtq_worker.context import WorkerContext

log = structlog.get_logger()

BUDGET = 100
"""Entries one reclaim call handles per queue (about a millisecond of Redis time)."""
PIPELINE = 20
"""Reclaim calls sent in one round trip: a worker serving many queues wakes up for a pass's
replies a few times, not once per queue. An idle queue's call costs Redis about 50 µs (most of
it the ten ``XPENDING`` from Lua), so a round trip holds Redis for about a millisecond."""
METRICS_LOOP = "reaper"
"""This loop's label on ``dtq_worker_redis_errors_total`` (kept: dashboards and alerts use it)."""


class Reclaimer:
    """Follows each queue's ``XAUTOCLAIM`` cursors to the end, pass after pass."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.cursors = {q.queue: ["0-0"] * PRIORITIES for q in ctx.queues}
        self._quiet_until: dict[str, float] = {}
        """Queue -> when (:func:`time.monotonic`) it is looked at again: its pending lists
        were empty, so nothing in it can be reclaimable before then."""

    @property
    def interval(self) -> float:
        """Seconds between passes: a quarter of the visibility timeout, within 50 ms .. 5 s."""
        return max(0.05, min(5.0, self.ctx.settings.worker.visibility_timeout_s / 4))

    async def run(self, stop: asyncio.Event) -> None:
        errors = self.ctx.metrics.redis_errors.labels(METRICS_LOOP)

        async def step() -> float:
            # A cursor that did not reach the end goes on at once (after a yield).
            return 0.001 if await self.sweep() else self.interval

        await run_supervised(
            step,
            stop=stop,
            event="reclaim_failed",
            on_error=lambda _, __: errors.inc(),
            traceback=False,
        )

    async def sweep(self) -> bool:
        """One pass over every queue due a look; True when a cursor did not reach the end."""
        ctx = self.ctx
        s = ctx.settings
        timeout_s = s.worker.visibility_timeout_s
        now = time.monotonic()
        due = [qk for qk in ctx.queues if self._quiet_until.get(qk.queue, 0.0) <= now]
        more = False
        for i in range(0, len(due), PIPELINE):
            chunk = due[i : i + PIPELINE]
            asked_at = time.monotonic()
            results = await ctx.scripts.reclaim_many(
                [(qk, self.cursors.setdefault(qk.queue, ["0-0"] * PRIORITIES)) for qk in chunk],
                consumer=ctx.consumer,
                min_idle_ms=int(timeout_s * 1000),
                budget=BUDGET,
                events_maxlen=s.queues.events_maxlen,
                retention_ms=s.tasks.retention_s * 1000,
                dlq_enabled=s.queues.dlq_enabled,
                dlq_maxlen=s.queues.dlq_maxlen,
            )
            for qk, result in zip(chunk, results, strict=True):
                self.cursors[qk.queue] = result.cursors
                more = more or any(c != "0-0" for c in result.cursors)
                if result.pending == 0:
                    # Taken before the call: Redis saw the lists empty later than this. A
                    # look sooner is never wrong: the jitter spreads the queues found empty
                    # together (at start) over the timeout, instead of all due at once.
                    jitter = random.random() / 4  # noqa: S311 - spreading, not cryptography
                    self._quiet_until[qk.queue] = asked_at + timeout_s * (1 - jitter)
                self._report(qk.queue, result)
        return more

    def _report(self, q: str, result: ReclaimResult) -> None:
        m = self.ctx.metrics
        if result.requeued:
            m.reclaimed.labels(logical_queue(q), "requeued").inc(result.requeued)
        if result.buried:
            m.reclaimed.labels(logical_queue(q), "buried").inc(result.buried)
        if result.lost:
            m.entry_lost.labels(logical_queue(q)).inc(result.lost)
            log.error(
                "stream_entries_lost",
                queue=q,
                count=result.lost,
                hint="a work stream was trimmed or entries deleted by hand",
            )
        if result.requeued or result.buried:
            log.warning("leases_reclaimed", queue=q, requeued=result.requeued, buried=result.buried)
