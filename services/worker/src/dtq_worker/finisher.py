"""Finishing: outcomes go to Redis in batches, one finish call per queue.

Every outcome gathered while a finish call is in flight goes in the next call, so at full speed
one round trip carries every attempt that ended during the previous one (docs/performance.md,
"Choices on the hot path"). Until its call lands an attempt is still held: the heartbeat keeps
extending its lease (:meth:`OutcomeBatches.hold_into`).

:class:`OutcomeBatches` is the batching itself (pure); :class:`Finisher` carries it out and
records what Redis answered: metrics, the canonical log lines, the processed/failed counts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import RETRYABLE
from dtq_core.infra.loops import raise_if_cancelled
from dtq_core.names import logical_queue, make_task_id
from dtq_core.protocol.outcomes import Fence, FinishOutcome
from dtq_core.protocol.scripts import Finish, Held, RunTimes
from dtq_worker.context import WorkerContext
from dtq_worker.executor import Execution
from dtq_worker.tasklog import TaskLog

log = structlog.get_logger()

Outcome = tuple[Finish, Execution]
FLUSH_ALL_TIMEOUT_S = 10
"""How long a draining worker tries to send its last outcomes before it gives up on them
(they are not lost: their entries stay pending and a peer's reclaimer takes them)."""


class OutcomeBatches:
    """Outcomes waiting for a finish call, and those riding in the one in flight."""

    def __init__(self) -> None:
        self.pending: dict[str, list[Outcome]] = {}
        self.in_flight: dict[str, list[Outcome]] = {}
        """The batches of the call on its way, by queue; a queue leaves once answered."""

    def add(self, queue: str, outcome: Outcome) -> None:
        self.pending.setdefault(queue, []).append(outcome)

    def take(self) -> dict[str, list[Outcome]]:
        """Start a call: everything pending moves in flight (and is returned, by queue)."""
        self.in_flight, self.pending = self.pending, {}
        return self.in_flight

    def next_batch(self) -> tuple[str, list[Outcome]] | None:
        """The queue whose batch goes next in the call in flight (``None``: all sent)."""
        return next(iter(self.in_flight.items()), None)

    def sent(self, queue: str) -> list[Outcome]:
        """Redis answered for ``queue``'s batch: it is no longer held."""
        return self.in_flight.pop(queue)

    def call_ended(self) -> None:
        """The call is over, answered or not: what it did not send goes first in the next.

        Outcomes are fenced by their lease, so sending one again is safe."""
        for queue, items in self.in_flight.items():
            self.pending.setdefault(queue, [])[:0] = items
        self.in_flight = {}

    def waiting(self) -> int:
        return sum(map(len, self.pending.values()))

    def hold_into(self, held: dict[str, list[Held]]) -> None:
        """Add every attempt whose outcome is not recorded yet to ``held`` (by queue)."""
        for batches in (self.pending, self.in_flight):
            for queue, items in batches.items():
                held[queue].extend(finish.held for finish, _ in items)


class Finisher:
    """Sends outcomes in batches and records the answers.

    ``processed`` and ``failed`` count the attempts that succeeded and those that ended
    otherwise (stale ones excluded), for the worker registry.
    """

    def __init__(
        self, ctx: WorkerContext, tasklog: TaskLog, ended: Callable[[], None] | None = None
    ) -> None:
        """Args:
        ended: called after each finish call that was answered (its attempts' concurrency
            slots are free: the claimer may try a queue at its limit again).
        """
        self.ctx = ctx
        self._ended = ended
        self.tasklog = tasklog
        self.batches = OutcomeBatches()
        self.processed = 0
        self.failed = 0
        self._wanted = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._duration_children: dict[tuple[str, str], list[float]] = {}

    def add(self, queue: str, finish: Finish, ex: Execution) -> None:
        """Queue an outcome for the next finish call (no await: on the hot path)."""
        self.batches.add(queue, (finish, ex))
        self._wanted.set()

    async def run(self) -> None:
        """Send what is pending whenever something is, until cancelled (it goes on while the
        worker drains)."""
        backoff = Backoff()
        while True:
            # A flush can swallow the cancellation that ends this loop (redis-py's send on
            # Python 3.11, see raise_if_cancelled): it would then wait for work forever.
            raise_if_cancelled()
            await self._wanted.wait()
            self._wanted.clear()
            self._idle.clear()
            try:
                await self.flush()
                backoff.reset()
            except RETRYABLE as exc:
                self.ctx.metrics.redis_errors.labels("finish").inc()
                delay = backoff.next()
                log.warning("finish_failed", error=str(exc), retry_in_s=delay)
                self._wanted.set()
                await asyncio.sleep(delay)
            finally:
                if not self._wanted.is_set():
                    self._idle.set()

    async def flush(self) -> None:
        """One finish call per queue for everything pending now."""
        s = self.ctx.settings
        by_name = self.ctx.by_name
        batches = self.batches
        batches.take()
        try:
            while (batch := batches.next_batch()) is not None:
                q, items = batch
                statuses = await self.ctx.scripts.finish(
                    by_name[q],
                    [f for f, _ in items],
                    events_maxlen=s.queues.events_maxlen,
                    result_retention_ms=s.tasks.result_retention_s * 1000,
                    retention_ms=s.tasks.retention_s * 1000,
                    dlq_enabled=s.queues.dlq_enabled,
                    dlq_maxlen=s.queues.dlq_maxlen,
                    run_times=run_times(items),
                )
                self._record(q, batches.sent(q), statuses)
                if self._ended is not None:
                    self._ended()
        finally:
            batches.call_ended()

    async def flush_all(self) -> None:
        """Send every outcome still waiting (the loop of :meth:`run` retries on Redis errors);
        give up after :data:`FLUSH_ALL_TIMEOUT_S`."""
        try:
            async with asyncio.timeout(FLUSH_ALL_TIMEOUT_S):
                while self.batches.pending or not self._idle.is_set():
                    self._wanted.set()
                    await asyncio.sleep(0)  # let the finisher pick the batch up
                    await self._idle.wait()
        except TimeoutError:
            log.warning("outcomes_not_sent", count=self.batches.waiting())

    def _record(self, queue: str, items: list[Outcome], statuses: list[str]) -> None:
        now = time.perf_counter()
        counts: Counter[tuple[str, str]] = Counter()
        lines: list[dict[str, Any]] = []
        m = self.ctx.metrics
        for (finish, ex), status in zip(items, statuses, strict=True):
            c = ex.claimed
            duration = now - ex.started if ex.started else 0.0
            counts[(c.task, status)] += 1
            series = self._duration_children.get((queue, c.task))
            if series is None:
                series = self._duration_children[(queue, c.task)] = m.duration.child(queue, c.task)
            m.duration.observe(series, duration)
            if self.tasklog.enabled:
                lines.append(
                    {
                        "task_id": make_task_id(queue, c.rand),
                        "queue": queue,
                        "task": c.task,
                        "attempt": c.attempt,
                        "status": status,
                        "duration_ms": round(duration * 1000, 3),
                        "error": _error_type(finish),
                        "trace_id": ex.trace_id,
                        "span_id": ex.span_id,
                    }
                )
        self.tasklog.write(lines)
        for (task, status), n in counts.items():
            m.tasks.labels(logical_queue(queue), task, status).inc(n)
            if status == Fence.STALE:
                m.stale_finish.labels(logical_queue(queue)).inc(n)
            elif status == "succeeded":
                self.processed += n
            else:
                self.failed += n


def run_times(items: list[Outcome]) -> RunTimes:
    """The run times of a batch's attempts up to now, for the queue's per-minute history
    (cancelled ones left out: their handler did not end by itself)."""
    now = time.perf_counter()
    return RunTimes.of(
        now - ex.started
        for finish, ex in items
        if ex.started and finish.outcome != FinishOutcome.CANCEL
    )


def _error_type(finish: Finish) -> str | None:
    if finish.outcome in {FinishOutcome.RETRY, FinishOutcome.DEAD}:
        return msgspec.json.decode(finish.payload).get("type")  # type: ignore[no-any-return]
    return None
