"""The reconcile duty: repair tasks whose stream entries an operator deleted, and drop the
consumers of workers that are gone.

Every ``DTQ_RECONCILE_INTERVAL_S`` the leader checks each queue's task records against their
stream entries (:func:`dtq_core.ops.recovery.reconcile_queue`). In normal operation it finds
nothing; after an ``XTRIM ... MAXLEN`` on a work stream it puts the affected tasks back.

In the same pass it deletes the queue's consumers that hold nothing and have been idle for
three visibility timeouts: every worker process reads under a name of its own, so a worker
killed without a clean stop (or any restart, over months) would otherwise leave one consumer
per incarnation in every group.
"""

from __future__ import annotations

from typing import cast

import structlog

from dtq_core.client import Client
from dtq_core.ops.recovery import reconcile_queue
from dtq_scheduler_leader.metrics import SchedulerMetrics
from dtq_scheduler_leader.sweeper import STALE_AFTER_VISIBILITY_TIMEOUTS

log = structlog.get_logger()


class Reconciler:
    def __init__(self, client: Client, metrics: SchedulerMetrics) -> None:
        self.client = client
        self.metrics = metrics
        self.consumer_idle_ms = round(
            STALE_AFTER_VISIBILITY_TIMEOUTS * client.settings.worker.visibility_timeout_s * 1000
        )

    async def step(self) -> float:
        """Check every queue; returns the seconds until the next pass."""
        queues = cast(set[str], await self.client.redis.smembers(self.client.keys.queues))
        for queue in sorted(queues):
            result = await reconcile_queue(self.client, queue)
            for outcome in ("restored", "requeued", "buried"):
                n = getattr(result, outcome)
                if n:
                    self.metrics.reconciled.labels(queue, outcome).inc(n)
            pruned = await self.client.scripts.prune_consumers(
                self.client.queue_keys(queue), min_idle_ms=self.consumer_idle_ms
            )
            if pruned:
                log.info("consumers_pruned", queue=queue, consumers=pruned)
            if result.restored or result.requeued or result.buried:
                log.error(
                    "stream_entries_reconciled",
                    queue=queue,
                    checked=result.checked,
                    restored=result.restored,
                    requeued=result.requeued,
                    buried=result.buried,
                    hint="a work stream was trimmed or entries deleted by hand",
                )
        return self.client.settings.scheduler.reconcile_interval_s
