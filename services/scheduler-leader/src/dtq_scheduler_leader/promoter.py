"""Promotion: move due delayed and retrying tasks into their priority streams, while leading.

Each pass reads the queue registry, and the lock in the same round trip so that a leader
whose lock was taken or deleted stops within a tick, not at its next renewal. A second round
trip reads, for every queue, the earliest entry of its delayed set and of its groups held by
their rate (what ``promote`` would look at). The fenced ``promote`` script is then called only
for the queues with something due, at most :data:`BATCH` tasks per call, again while a call
fills its batch: an idle queue costs a pass two ``ZRANGE`` of an empty key, not a function
call. The pass then sleeps until the earliest due time left (Redis time), never longer than
``DTQ_SCHEDULER_TICK_S``, so a task submitted with a short delay during the sleep is late by
at most one tick.

The fence still holds where it matters: a queue's epoch is raised by the first promotion of
the new leader there, and a deposed leader that promotes before it moves a task that was due
(``promote`` takes each task off the delayed set in the same script, so never twice).
"""

from __future__ import annotations

import redis.asyncio as aioredis
import structlog

from dtq_core.infra.connection import server_ms
from dtq_core.infra.settings import Settings
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.scripts import Scripts
from dtq_scheduler_leader.leader import Leadership
from dtq_scheduler_leader.metrics import SchedulerMetrics

log = structlog.get_logger()

BATCH = 100
"""Tasks per script call: about 1 ms of Redis time, short enough not to stall clients."""


class Promoter:
    """The promotion duty of the leader."""

    def __init__(
        self,
        redis: aioredis.Redis,
        scripts: Scripts,
        keys: Keys,
        settings: Settings,
        *,
        leadership: Leadership,
        metrics: SchedulerMetrics,
    ) -> None:
        self.redis = redis
        self.scripts = scripts
        self.keys = keys
        self.settings = settings
        self.leadership = leadership
        self.metrics = metrics

    async def step(self) -> float:
        """One pass over every queue; returns the seconds to sleep before the next one.

        Raises:
            StaleLeaderError: a newer leadership has acted on a queue (this one is deposed).
        """
        tick = self.settings.scheduler.tick_s
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.smembers(self.keys.queues)
            await pipe.get(self.keys.leader)
            queues, holder = await pipe.execute()
        if not self.leadership.confirm(holder):
            return 0.0
        order = sorted(str(q) for q in queues)
        heads = await self.due_times(order)
        now_ms = await server_ms(self.redis)
        earliest = -1
        promoted = False
        for queue, head in zip(order, heads, strict=True):
            next_due = head
            if 0 <= head <= now_ms:
                if not self.leadership.is_leader:
                    return 0.0
                _, next_due = await self.promote_queue(queue)
                promoted = True
            if next_due >= 0 and (earliest < 0 or next_due < earliest):
                earliest = next_due
        if earliest < 0:
            return tick
        if promoted:  # the calls took time: the sleep counts from now
            now_ms = await server_ms(self.redis)
        return min(tick, max(0.0, (earliest - now_ms) / 1000))

    async def due_times(self, queues: list[str]) -> list[int]:
        """Each queue's earliest due time in ms (-1: nothing delayed and no group held), in
        one round trip (one per node on a cluster)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue in queues:
                qk = self.keys.queue(queue)
                await pipe.zrange(qk.delayed, 0, 0, withscores=True)
                await pipe.zrange(qk.groups_due, 0, 0, withscores=True)
            replies = await pipe.execute()
        out = []
        for i in range(0, len(replies), 2):
            scores = [int(score) for entries in replies[i : i + 2] for _, score in entries]
            out.append(min(scores, default=-1))
        return out

    async def promote_queue(self, queue: str) -> tuple[int, int]:
        """Promote everything due in ``queue``; returns how many, and its next due time in
        ms (-1 when nothing is delayed)."""
        qk = self.keys.queue(queue)
        total = 0
        while True:
            promoted, next_due = await self.scripts.promote(
                qk,
                epoch=self.leadership.epoch,
                limit=BATCH,
                events_maxlen=self.settings.queues.events_maxlen,
                retention_ms=self.settings.tasks.retention_s * 1000,
            )
            total += promoted
            if promoted < BATCH or not self.leadership.is_leader:
                break
        if total:
            self.metrics.promoted.labels(queue=queue).inc(total)
            log.debug("tasks_promoted", queue=queue, count=total, epoch=self.leadership.epoch)
        return total, next_due
