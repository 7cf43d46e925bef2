"""The running set: attempts running now and those prefetched for a free slot, their deadlines,
and cancelling them.

An attempt admitted here runs at once while fewer than ``concurrency`` run, and waits in the
prefetch buffer otherwise; when one ends its outcome goes to the finisher and the next buffered
attempt starts in its slot. Timeouts live in 100 ms slots (:data:`DEADLINE_SLOTS_PER_S`) swept
by one watchdog, and a finished attempt leaves its slot at once (docs/performance.md, "Choices
on the hot path").
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections import deque

from dtq_core.names import make_task_id
from dtq_core.protocol.outcomes import FinishOutcome
from dtq_core.protocol.scripts import Finish, Held
from dtq_core.tasks import ProgressSink, Spawner, TaskContext, TaskRegistry
from dtq_worker.executor import Execution, Executor
from dtq_worker.finisher import Finisher
from dtq_worker.metrics import WorkerMetrics

DEADLINE_SLOTS_PER_S = 10


class RunningSet:
    """Owns the attempts this worker has started or prefetched, until their outcome is handed
    to the finisher (or they are handed back)."""

    def __init__(
        self,
        *,
        concurrency: int,
        registry: TaskRegistry,
        executor: Executor,
        finisher: Finisher,
        metrics: WorkerMetrics,
        progress: ProgressSink,
        room: asyncio.Event,
        spawner: Spawner | None = None,
    ) -> None:
        """Args:
        progress: where handlers' progress reports go.
        room: set whenever an attempt ends (a slot or buffer place may be free).
        spawner: makes the children a handler spawns.
        """
        self.concurrency = concurrency
        self._registry = registry
        self._executor = executor
        self._finisher = finisher
        self._metrics = metrics
        self._progress = progress
        self._room = room
        self._spawner = spawner
        self._running: dict[str, tuple[Execution, asyncio.Task[None]]] = {}
        self._buffer: deque[Execution] = deque()
        self._starting = True
        # Timeouts: running attempts by the tenth of a second their deadline falls in, so a
        # finished attempt leaves at once (a heap with lazy deletion would keep every attempt
        # of the last DTQ_TASK_TIMEOUT_MS alive: hundreds of MB at full speed).
        self._deadline_slots: dict[int, set[str]] = {}
        self._deadline_order: list[int] = []
        self._wait_children: dict[str, list[float]] = {}
        # Set by bind(): attempts are started only from inside the worker's loop.
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]

    # -- what is held ------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Handlers running now."""
        return len(self._running)

    @property
    def prefetched(self) -> int:
        """Attempts claimed and waiting for a free slot."""
        return len(self._buffer)

    def hold_into(self, held: dict[str, list[Held]]) -> None:
        """Add every attempt running or prefetched to ``held`` (by queue)."""
        for ex, _ in self._running.values():
            held[ex.queue].append(ex.held)
        for ex in self._buffer:
            held[ex.queue].append(ex.held)

    # -- starting ----------------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start handlers on ``loop`` (``loop.create_task`` is cheaper than looking the loop
        up for every attempt)."""
        self._loop = loop

    def admit(self, ex: Execution) -> None:
        """Run a claimed attempt now if a slot is free, else buffer it."""
        if len(self._running) < self.concurrency:
            self._start(ex)
        else:
            self._buffer.append(ex)

    def stop_starting(self) -> None:
        """Start nothing more from the buffer (the worker is draining)."""
        self._starting = False

    def _start(self, ex: Execution) -> None:
        c = ex.claimed
        ex.started = time.perf_counter()
        m = self._metrics
        m.wait.observe(self._wait_series(ex.queue), max(0.0, time.time() - c.queued_at_us / 1e6))
        task = self._loop.create_task(self._execute(ex))
        self._running[c.rand] = (ex, task)
        slot = math.ceil((ex.started + c.timeout_ms / 1000) * DEADLINE_SLOTS_PER_S)
        ex.deadline_slot = slot
        members = self._deadline_slots.get(slot)
        if members is None:
            members = self._deadline_slots[slot] = set()
            heapq.heappush(self._deadline_order, slot)
        members.add(c.rand)

    def _wait_series(self, queue: str) -> list[float]:
        series = self._wait_children.get(queue)
        if series is None:
            series = self._wait_children[queue] = self._metrics.wait.child(queue)
        return series

    async def _execute(self, ex: Execution) -> None:
        c = ex.claimed
        ctx = TaskContext(
            task_id=make_task_id(ex.queue, c.rand),
            queue=ex.queue,
            task=c.task,
            attempt=c.attempt,
            max_attempts=c.max_attempts,
            rand=c.rand,
            lease=c.lease,
            sink=self._progress,
            loop=self._loop,
            spawner=self._spawner,
        )
        finish: Finish | None = None
        try:
            finish = await self._executor.run(ex, self._registry.get(c.task), ctx)
        finally:
            self._running.pop(c.rand, None)
            members = self._deadline_slots.get(ex.deadline_slot)
            if members is not None:
                members.discard(c.rand)
            if finish is not None:
                self._finisher.add(ex.queue, finish, ex)
            while self._buffer and len(self._running) < self.concurrency and self._starting:
                self._start(self._buffer.popleft())
            self._room.set()

    # -- deadlines and cancellation ----------------------------------------------------------

    async def watch_deadlines(self) -> None:
        """Cancel handlers past their timeout (the executor turns that into a failure)."""
        while True:
            await asyncio.sleep(1 / DEADLINE_SLOTS_PER_S)
            now = time.perf_counter() * DEADLINE_SLOTS_PER_S
            while self._deadline_order and self._deadline_order[0] <= now:
                slot = heapq.heappop(self._deadline_order)
                for rand in self._deadline_slots.pop(slot, ()):
                    self.cancel(rand, "timeout")

    def cancel(self, rand: str, reason: str) -> bool:
        """Cancel a running handler (``cancel``, ``lease_lost``, ``timeout``); drop it if only
        prefetched (finished as cancelled at once when the user asked). Returns whether this
        worker had the attempt."""
        entry = self._running.get(rand)
        if entry is not None:
            ex, task = entry
            if ex.cancel_reason is None:
                ex.cancel_reason = reason
                task.cancel()
            return True
        for ex in list(self._buffer):
            if ex.claimed.rand == rand:
                self._buffer.remove(ex)
                if reason == "cancel":
                    # Never started: finish it as cancelled right away.
                    self._finisher.add(ex.queue, Finish(ex.held, FinishOutcome.CANCEL), ex)
                return True
        return False

    # -- draining ----------------------------------------------------------------------------

    def take_prefetched(self) -> list[Execution]:
        """Empty the buffer (to hand its attempts back)."""
        prefetched = list(self._buffer)
        self._buffer.clear()
        return prefetched

    def running_tasks(self) -> list[asyncio.Task[None]]:
        return [task for _, task in self._running.values()]

    def running_executions(self) -> list[Execution]:
        return [ex for ex, _ in self._running.values()]

    def abandon(self, reason: str) -> list[asyncio.Task[None]]:
        """Cancel every running handler without an outcome (``drain``: their attempts were
        handed back); returns their tasks."""
        for ex, task in list(self._running.values()):
            ex.cancel_reason = reason
            task.cancel()
        return self.running_tasks()
