"""The stale-worker sweeper: workers whose heartbeat stopped leave the registry, with an event.

"Stale" means one thing in dtq: a worker whose last heartbeat is older than the threshold
below. (The worker's reclaimer, which takes back the tasks of such a worker, is another
part.)

A worker whose last heartbeat is older than three visibility timeouts is removed from the
worker registry by the ``stale_workers`` script (Redis time), and a ``worker.stale`` event is
added to the global event stream for each one. Its in-flight tasks need nothing from here:
the workers' reclaimer takes them back after the visibility timeout.
"""

from __future__ import annotations

import redis.asyncio as aioredis
import structlog

from dtq_core.infra.settings import Settings
from dtq_core.protocol.events import worker_stale_event
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.scripts import Scripts
from dtq_scheduler_leader.metrics import SchedulerMetrics

log = structlog.get_logger()

STALE_AFTER_VISIBILITY_TIMEOUTS = 3
"""Three visibility timeouts: a worker that is only slow (long GC pause, overloaded host) is
not declared gone before its tasks would have been reclaimed anyway."""


class StaleWorkerSweeper:
    """The stale-worker duty of the leader."""

    def __init__(
        self,
        redis: aioredis.Redis,
        scripts: Scripts,
        keys: Keys,
        settings: Settings,
        metrics: SchedulerMetrics,
    ) -> None:
        self.redis = redis
        self.scripts = scripts
        self.keys = keys
        self.settings = settings
        self.metrics = metrics
        self.age_ms = round(
            STALE_AFTER_VISIBILITY_TIMEOUTS * settings.worker.visibility_timeout_s * 1000
        )

    async def step(self) -> float:
        """Remove stale workers and announce each; returns the seconds until the next check."""
        await self.sweep()
        return self.settings.worker.heartbeat_interval_s

    async def sweep(self) -> list[str]:
        """Returns the ids of the workers removed."""
        stale = [str(w) for w in await self.scripts.stale_workers(self.keys.workers, self.age_ms)]
        if not stale:
            return stale
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker in stale:
                await pipe.xadd(
                    self.keys.events,
                    worker_stale_event(worker),
                    maxlen=self.settings.queues.events_maxlen,
                    approximate=True,
                )
            await pipe.execute()
        for worker in stale:
            log.warning("worker_marked_stale", worker=worker, age_ms=self.age_ms)
        self.metrics.workers_stale.inc(len(stale))
        return stale
