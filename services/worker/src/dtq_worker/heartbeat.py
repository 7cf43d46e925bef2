"""Liveness: lease extension of every held attempt, the worker registry, and cancellations.

Runs in its own task and never runs user code, so a busy handler cannot starve it (a handler
that blocks the event loop can: see docs/task-lifecycle.md). The time of its last successful
beat is what the worker's ``/health`` reads (:func:`late_after_s`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import RETRYABLE
from dtq_core.infra.loops import run_supervised
from dtq_core.infra.pubsub import listen
from dtq_core.infra.settings import WorkerSettings
from dtq_core.names import logical_queue
from dtq_core.protocol.scripts import Held
from dtq_core.protocol.workers import WorkerRecord
from dtq_worker.context import WorkerContext

log = structlog.get_logger()

EXTEND_CHUNK = 500
"""Attempts per lease-extension call (a beat sends its chunks side by side)."""


def late_after_s(worker: WorkerSettings) -> float:
    """How old the last successful beat may be before ``/health`` fails: a third of the
    visibility timeout, so that two thirds of it remain to restart the worker before its
    tasks are reclaimed; and never less than two heartbeat intervals, because a beat is only
    due one interval after the last one was sent (at the largest interval allowed, a third
    of the visibility timeout, the age would otherwise pass the bound before every beat)."""
    return max(worker.visibility_timeout_s / 3, 2 * worker.heartbeat_interval_s)


Cancel = Callable[[str, str], bool]
"""Cancel the attempt of a task rand for a reason (``cancel``, ``lease_lost``); returns whether
this worker held it (:meth:`dtq_worker.running.RunningSet.cancel`)."""


class Heartbeat:
    """Keeps the worker's leases and registry record alive, and hears of cancellations."""

    def __init__(
        self,
        ctx: WorkerContext,
        *,
        held: Callable[[], dict[str, list[Held]]],
        cancel: Cancel,
        record: Callable[[], WorkerRecord],
    ) -> None:
        """Args:
        held: every attempt the worker holds, by queue (their leases are extended).
        cancel: called for each attempt whose lease was lost or whose task was cancelled.
        record: the worker's registry record as of now.
        """
        self.ctx = ctx
        self._held = held
        self._cancel = cancel
        self._record = record
        self.started = time.monotonic()
        self.last_ok: float | None = None
        """When the last successful beat was sent (``time.monotonic()``): every lease it
        extended runs at least a visibility timeout from then."""
        ctx.metrics.heartbeat_age.set_function(self.age)

    def age(self) -> float:
        """Seconds since the last successful beat was sent (since start before the first)."""
        return time.monotonic() - (self.started if self.last_ok is None else self.last_ok)

    async def run(self) -> None:
        """Beat every DTQ_HEARTBEAT_INTERVAL_S until cancelled (it goes on while draining)."""
        interval = self.ctx.settings.worker.heartbeat_interval_s
        metrics = self.ctx.metrics

        async def step() -> float:
            t0 = time.monotonic()
            await self.beat()
            return max(0.0, interval - (time.monotonic() - t0))

        def failed(_: Exception, __: float) -> None:
            metrics.redis_errors.labels("heartbeat").inc()

        await run_supervised(
            step,
            event="heartbeat_failed",
            backoff=Backoff(cap=interval),
            on_error=failed,
            traceback=False,
        )

    async def beat(self) -> None:
        """Extend every held lease and stamp the registry, all at once: a beat costs one round
        trip of the slowest call, not the sum of them, so leases keep up on a slow link."""
        sent = time.monotonic()
        calls = [
            self._extend(q, held[i : i + EXTEND_CHUNK])
            for q, held in self._held().items()
            for i in range(0, len(held), EXTEND_CHUNK)
        ]
        results = await asyncio.gather(
            *calls, self.register(), self._reregister_queues(), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        self.last_ok = sent

    async def _extend(self, queue: str, held: list[Held]) -> None:
        ctx = self.ctx
        lost, cancel = await ctx.scripts.extend_lease(ctx.by_name[queue], ctx.consumer, held)
        for rand in lost:
            if self._cancel(rand, "lease_lost"):
                ctx.metrics.lease_lost.labels(logical_queue(queue)).inc()
                log.warning("lease_lost", task_id=f"{queue}:{rand}", queue=queue)
        for rand in cancel:
            self._cancel(rand, "cancel")

    async def _reregister_queues(self) -> None:
        """Put the queues this worker claims from (their partitions too) back in the queue
        registry if they went missing: the registry is one key on one master, and a failover
        that lost a write to it would otherwise leave a served queue's delayed tasks
        unpromoted (the scheduler promotes what the registry lists). A queue a live worker
        serves is deliberate (the router admits submits into it for the same reason). Best
        effort: a refusal (a full registry, Redis at maxmemory) is the start-up's to report."""
        ctx = self.ctx
        try:
            await ctx.scripts.register_queues(
                ctx.keys.queues, list(ctx.by_name), ctx.settings.queues.max_queues
            )
        except RETRYABLE as exc:
            log.debug("queue_reregistration_failed", error=str(exc))

    async def register(self) -> None:
        ctx = self.ctx
        key = ctx.keys.worker(ctx.consumer)
        await ctx.scripts.heartbeat(ctx.keys.workers, ctx.consumer)
        fields: dict[Any, Any] = self._record().to_fields()
        async with ctx.redis.pipeline(transaction=False) as pipe:
            # Pipelined commands return the pipeline, not an awaitable to await.
            pipe.hset(key, mapping=fields)  # type: ignore[unused-awaitable]
            # Three missed beats and the record disappears by itself.
            pipe.pexpire(key, int(ctx.settings.worker.heartbeat_interval_s * 3000) + 1000)  # type: ignore[unused-awaitable]
            await pipe.execute()

    async def deregister(self) -> None:
        """Leave the registry and the consumer groups (once drained this worker holds
        nothing; the function keeps any consumer that still does)."""
        ctx = self.ctx
        try:
            async with ctx.redis.pipeline(transaction=False) as pipe:
                pipe.zrem(ctx.keys.workers, ctx.consumer)  # type: ignore[unused-awaitable]
                pipe.delete(ctx.keys.worker(ctx.consumer))  # type: ignore[unused-awaitable]
                await pipe.execute()
            for qk in ctx.queues:
                await ctx.scripts.prune_consumers(qk, min_idle_ms=0, only=ctx.consumer)
        except RETRYABLE as exc:
            log.warning("deregister_failed", error=str(exc))

    async def listen_cancellations(self) -> None:
        """Cancel running handlers as soon as a cancellation is published (the heartbeat's
        lease extension also reports them, so a missed message costs one interval);
        :func:`dtq_core.infra.pubsub.listen` keeps the subscription alive."""
        ctx = self.ctx

        def cancelled(key: str) -> None:
            prefix, _, rand = key.rpartition(":")
            # Read each time: a served queue may have grown partitions since.
            if any(prefix + ":" == q.task_prefix for q in ctx.by_name.values()):
                self._cancel(rand, "cancel")

        await listen(
            ctx.blocking,
            ctx.keys.cancel_channel,
            cancelled,
            on_error=lambda _exc: ctx.metrics.redis_errors.labels("cancel_listener").inc(),
        )
