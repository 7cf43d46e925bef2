"""The worker: claims in strict priority, runs handlers, finishes in batches, drains on stop.

Loops (one asyncio task each, in one TaskGroup):

- claim: keeps ``concurrency + prefetch`` attempts held; claims a batch as soon as there is
  room for one, so the next batch is already on its way while the current one runs. When every
  queue is empty it parks one blocking wake-up read per queue and adopts what it delivers.
- finish: sends every outcome gathered since its last call in one script call per queue.
- heartbeat (:mod:`dtq_worker.heartbeat`): extends the leases of everything held, learns of
  cancellations, stamps the worker registry.
- reaper (:mod:`dtq_worker.reaper`): takes back the attempts of workers that stopped
  heartbeating.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import secrets
import time
from collections import Counter, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import msgspec
import redis.asyncio as aioredis
import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import RETRYABLE, StreamReply, connect
from dtq_core.infra.settings import Settings
from dtq_core.names import make_task_id
from dtq_core.protocol.keys import Keys, QueueKeys
from dtq_core.protocol.outcomes import Fence, FinishOutcome
from dtq_core.protocol.routing import encode_routes
from dtq_core.protocol.scripts import Finish, Held, Scripts, task_defaults
from dtq_core.tasks import TaskContext, TaskRegistry
from dtq_worker.executor import Execution, Executor
from dtq_worker.metrics import WorkerMetrics
from dtq_worker.tasklog import TaskLog

if TYPE_CHECKING:
    from dtq_worker.heartbeat import Heartbeat

log = structlog.get_logger()

WARM_CONNECTIONS = 6
"""Commands a worker has in flight at once in steady state: a claim, a finish, a heartbeat's
extension and registration, the reaper, a progress report."""

WAKE_BLOCK_MS = 1000
PAUSED_RECHECK_S = 1.0
RELEASE_CHUNK = 200
RECOVER_COUNT = 100
"""Entries per stream a worker takes back from its own PEL after a lost reply."""
DEADLINE_SLOTS_PER_S = 10


def consumer_name(worker_id: str) -> str:
    """The id a worker process registers and reads its queues under:
    ``<DTQ_WORKER_ID>:<6 random hex digits>`` (docs/operations.md states this format).

    The random part is drawn at every start (failure mode F7, docs/failure-modes.md): a
    restarted worker never shares a PEL with its former self, and two processes given the
    same ``DTQ_WORKER_ID`` never share one.
    """
    return f"{worker_id}:{secrets.token_hex(3)}"


class Worker:
    """One worker process's engine. ``await Worker(...).run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        settings: Settings,
        registry: TaskRegistry,
        queues: Sequence[str],
        *,
        concurrency: int | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.keys = Keys(settings.namespace)
        self.queues = [self.keys.queue(q) for q in dict.fromkeys(queues)]
        self.concurrency = concurrency or settings.worker.concurrency
        self.batch = max(1, min(settings.worker.effective_claim_batch, self.concurrency))
        self.capacity = self.concurrency + settings.worker.effective_prefetch
        self.worker_id = settings.worker.id
        self.consumer = consumer_name(settings.worker.id)
        self.metrics = metrics or WorkerMetrics()
        self.metrics.concurrency.set(self.concurrency)
        self.metrics.watch(lambda: len(self.running), lambda: len(self.buffer))
        self.redis: aioredis.Redis = connect(settings, client_name=f"dtq-worker:{self.consumer}")
        self.blocking: aioredis.Redis = connect(
            settings,
            client_name=f"dtq-worker-wake:{self.consumer}",
            socket_timeout=WAKE_BLOCK_MS / 1000 + 5,
        )
        self.scripts = Scripts(self.redis)
        self.executor = Executor(settings, self.consumer, self.concurrency)
        self.running: dict[str, tuple[Execution, asyncio.Task[None]]] = {}
        self.buffer: deque[Execution] = deque()
        self.adopted: dict[str, list[tuple[int, str, str]]] = {q.queue: [] for q in self.queues}
        self.empty: set[str] = set()
        self.paused: dict[str, float] = {}
        self.readers: dict[str, asyncio.Task[None]] = {}
        self.pending_finish: dict[str, list[tuple[Finish, Execution]]] = {}
        self.finishing: dict[str, list[tuple[Finish, Execution]]] = {}
        """The finish batches on their way to Redis (their attempts are still held)."""
        self.finish_event = asyncio.Event()
        self.room_event = asyncio.Event()
        self.stopping = False
        self.processed = 0
        self.failed = 0
        self.started_at = time.time()
        self.state = "starting"
        self._finisher_idle = asyncio.Event()
        self._finisher_idle.set()
        self._rr = 0
        self._qk = {q.queue: q for q in self.queues}
        self.routes = encode_routes(registry)
        """What the heartbeat publishes: this worker's tasks and their declared queues."""
        self.defaults = task_defaults(
            settings.retries.max_attempts,
            settings.tasks.timeout_ms,
            [(t.name, t.max_attempts, t.timeout_s) for t in registry],
        )
        # Set by run(); tasks are started only from inside it.
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        # Timeouts: running attempts by the tenth of a second their deadline falls in, so a
        # finished attempt leaves at once (a heap with lazy deletion would keep every attempt
        # of the last DTQ_TASK_TIMEOUT_MS alive: hundreds of MB at full speed).
        self.deadline_slots: dict[int, set[str]] = {}
        self.deadline_order: list[int] = []
        self._wait_children: dict[str, list[float]] = {}
        self._duration_children: dict[tuple[str, str], list[float]] = {}
        self.tasklog = TaskLog(
            enabled=settings.observability.log_level in {"DEBUG", "INFO"},
            json=settings.observability.log_json,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def held_count(self) -> int:
        return len(self.running) + len(self.buffer)

    def held(self) -> dict[str, list[Held]]:
        """Every attempt this worker holds, by queue: running, prefetched, and done but not
        yet recorded (its outcome waits for, or rides in, a finish call). On a slow link a
        finish can take a while; until it lands the attempt is still ours to keep."""
        out: dict[str, list[Held]] = {q.queue: [] for q in self.queues}
        for ex, _ in self.running.values():
            out[ex.queue].append(ex.held)
        for ex in self.buffer:
            out[ex.queue].append(ex.held)
        for batches in (self.pending_finish, self.finishing):
            for queue, items in batches.items():
                out[queue].extend(finish.held for finish, _ in items)
        return out

    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set, then drain (DTQ_DRAIN_TIMEOUT_S) and return."""
        from dtq_worker.heartbeat import Heartbeat  # noqa: PLC0415 - avoids an import cycle
        from dtq_worker.reaper import Reaper  # noqa: PLC0415

        self._loop = asyncio.get_running_loop()
        registered = await self._register_queues(retry=False)
        self.state = "running"
        heartbeat = Heartbeat(self)
        reaper = Reaper(self)
        await self._warm_up(heartbeat)
        log.info(
            "worker_started",
            worker=self.consumer,
            queues=[q.queue for q in self.queues],
            concurrency=self.concurrency,
            prefetch=self.capacity - self.concurrency,
            claim_batch=self.batch,
            tasks=sorted(t.name for t in self.registry),
        )
        try:
            async with asyncio.TaskGroup() as tg:
                # Heartbeats, cancellations and finishing go on while the worker drains.
                background: list[asyncio.Task[Any]] = [
                    tg.create_task(heartbeat.run(), name="dtq-heartbeat"),
                    tg.create_task(heartbeat.listen_cancellations(), name="dtq-cancel-listener"),
                    tg.create_task(reaper.run(stop), name="dtq-reaper"),
                    tg.create_task(self._finish_loop(), name="dtq-finisher"),
                    tg.create_task(self._watchdog(), name="dtq-timeouts"),
                ]
                if not registered:
                    background.append(
                        tg.create_task(self._register_queues(), name="dtq-register-queues")
                    )
                await self._claim_loop(stop)
                await self._drain()
                for task in background:
                    task.cancel()
        finally:
            self.executor.shutdown()
            await heartbeat.deregister()
            await self.redis.aclose()
            await self.blocking.aclose()
            log.info("worker_stopped", worker=self.consumer, processed=self.processed)

    async def _warm_up(self, heartbeat: Heartbeat) -> None:
        """Open the connections the loops will use side by side, then beat once, before the
        first claim. On a slow link each new connection costs round trips of its own; paid
        during the first beat, they would let the first claimed leases expire unextended."""
        try:
            await asyncio.gather(*(self.redis.ping() for _ in range(WARM_CONNECTIONS)))
            await heartbeat.beat()
        except RETRYABLE as exc:
            log.warning("warm_up_failed", error=str(exc))  # the loops retry on their own

    async def _register_queues(self, *, retry: bool = True) -> bool:
        """Register the queues this worker serves in the queue registry (submits to a queue
        that is not there are refused), up to DTQ_MAX_QUEUES. Its task names travel with
        every heartbeat instead (:mod:`dtq_core.protocol.routing`), so they vanish with the worker.

        Tried once before the worker starts; when that fails (Redis away, or full: a new
        registry member is refused under ``maxmemory`` while claims and finishes are not) the
        worker starts anyway and keeps trying in the background, since draining is what frees
        memory. Returns whether the queues are registered.
        """
        backoff = Backoff()
        names = [q.queue for q in self.queues]
        while True:
            try:
                flags = await self.scripts.register_queues(
                    self.keys.queues, names, self.settings.queues.max_queues
                )
            except RETRYABLE as exc:
                delay = backoff.next()
                log.warning(
                    "queue_registration_failed",
                    error=str(exc),
                    retry_in_s=delay,
                    starting_anyway=not retry,
                )
                if not retry:
                    return False
                await asyncio.sleep(delay)
                continue
            refused = [q for q, ok in zip(names, flags, strict=True) if not ok]
            if refused:
                log.error(
                    "queue_registry_full",
                    queues=refused,
                    limit=self.settings.queues.max_queues,
                    hint="submits to these queues are refused: delete unused queues or raise "
                    "DTQ_MAX_QUEUES",
                )
            return True

    # -- claiming ----------------------------------------------------------------------------

    def _room(self) -> int:
        """How many to claim now (0: not yet).

        Full batches as long as there is room for one: a round trip costs more than the
        tasks it carries when those are short. Below a batch, claim only when at least half
        the slots would otherwise sit idle (with a prefetch smaller than a batch).
        """
        room = self.capacity - self.held_count
        if room >= self.batch:
            return self.batch
        idle = self.concurrency - len(self.running)
        if not self.buffer and idle * 2 >= self.concurrency:
            return min(room, idle)
        return 0

    def _next_queue(self) -> QueueKeys | None:
        n = len(self.queues)
        now = time.monotonic()
        for i in range(n):
            qk = self.queues[(self._rr + i) % n]
            q = qk.queue
            if self.adopted[q]:
                self._rr = (self._rr + i + 1) % n
                return qk
            if q in self.empty or self.paused.get(q, 0) > now:
                continue
            self._rr = (self._rr + i + 1) % n
            return qk
        return None

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        backoff = Backoff()
        stop_wait = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                count = self._room()
                qk = self._next_queue() if count else None
                if qk is None:
                    await self._wait_for_work(stop_wait, idle=count > 0)
                    continue
                try:
                    await self._claim(qk, count)
                    backoff.reset()
                except RETRYABLE as exc:
                    self.metrics.redis_errors.labels("claim").inc()
                    delay = backoff.next()
                    log.warning("claim_failed", queue=qk.queue, error=str(exc), retry_in_s=delay)
                    await _sleep_or_stop(stop_wait, delay)
                    await self._recover_deliveries(qk)
        finally:
            stop_wait.cancel()
            self.stopping = True

    async def _wait_for_work(self, stop_wait: asyncio.Future[Any], *, idle: bool) -> None:
        """Nothing to claim right now: wait for room, a wake-up read, or an unpaused queue."""
        if idle:
            for qk in self.queues:
                q = qk.queue
                if q in self.empty and q not in self.readers and not self.adopted[q]:
                    self.readers[q] = asyncio.create_task(self._wake_read(qk), name=f"wake-{q}")
        self.room_event.clear()
        timeout = None
        if self.paused:
            timeout = max(0.0, min(self.paused.values()) - time.monotonic())
        room = asyncio.ensure_future(self.room_event.wait())
        try:
            await asyncio.wait(
                {room, stop_wait}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            room.cancel()
        now = time.monotonic()
        for q, until in list(self.paused.items()):
            if until <= now:
                del self.paused[q]

    async def _wake_read(self, qk: QueueKeys) -> None:
        """Block on the queue's streams; what arrives is delivered to us, so adopt it.

        COUNT applies per stream: up to one entry per priority arrives (docs/performance.md).
        """
        streams: dict[Any, Any] = dict.fromkeys(qk.streams_high_first, ">")
        prio = {s: p for p, s in enumerate(qk.streams)}
        backoff = Backoff()
        try:
            while not self.stopping:
                try:
                    reply = cast(
                        StreamReply,
                        await self.blocking.xreadgroup(
                            "workers", self.consumer, streams, count=1, block=WAKE_BLOCK_MS
                        ),
                    )
                    backoff.reset()
                except RETRYABLE as exc:
                    if "NOGROUP" in str(exc):
                        # The queue has never been used: a claim creates its groups.
                        break
                    self.metrics.redis_errors.labels("wake").inc()
                    await asyncio.sleep(backoff.next())
                    if await self._recover_deliveries(qk):
                        break
                    continue
                if reply:
                    for stream, entries in reply:
                        for eid, fields in entries:
                            self.adopted[qk.queue].append((prio[stream], eid, fields["t"]))
                    break
        finally:
            self.readers.pop(qk.queue, None)
            self.empty.discard(qk.queue)
            self.room_event.set()

    async def _recover_deliveries(self, qk: QueueKeys) -> int:
        """Adopt the entries Redis delivered to this worker whose reply never came back.

        A wake-up read or a claim whose reply was lost (a dropped or half-open connection)
        leaves its entries pending under this consumer, unknown to the worker: without this
        they would wait for the reaper, a visibility timeout later. Read back from the
        worker's own PEL (``XREADGROUP`` from id 0) after such a failure, whatever it does not
        hold goes to the next claim, whose script starts a queued task from its entry, and
        reports again, with the same lease, an attempt a lost claim had started. The claim
        loop is the only one that claims, and it is here, so nothing else is about to start
        these entries. Returns how many were adopted."""
        held = {h.entry_id for items in self.held().values() for h in items}
        held |= {eid for _, eid, _ in self.adopted[qk.queue]}
        prio = {s: p for p, s in enumerate(qk.streams)}
        try:
            reply = cast(
                StreamReply,
                await self.blocking.xreadgroup(
                    "workers", self.consumer, dict.fromkeys(qk.streams, "0"), count=RECOVER_COUNT
                ),
            )
        except RETRYABLE as exc:
            log.debug("recover_deliveries_failed", queue=qk.queue, error=str(exc))
            return 0
        found = [
            (prio[stream], eid, fields["t"])
            for stream, entries in reply or []
            for eid, fields in entries
            if eid not in held and fields and "t" in fields
        ]
        if found:
            self.adopted[qk.queue].extend(found)
            self.empty.discard(qk.queue)
            log.warning("lost_deliveries_recovered", queue=qk.queue, count=len(found))
        return len(found)

    async def _claim(self, qk: QueueKeys, count: int) -> None:
        q = qk.queue
        adopt, self.adopted[q] = self.adopted[q], []
        s = self.settings
        try:
            paused, claimed = await self.scripts.claim(
                qk,
                consumer=self.consumer,
                count=count,
                events_maxlen=s.queues.events_maxlen,
                retention_ms=s.tasks.retention_s * 1000,
                defaults=self.defaults,
                adopt=adopt,
            )
        except BaseException:
            # The adopted entries are still ours in the PEL; try them again next time.
            self.adopted[q] = adopt + self.adopted[q]
            raise
        self.metrics.claims.labels(q).inc()
        self.metrics.claimed.labels(q).inc(len(claimed))
        if paused:
            self.paused[q] = time.monotonic() + PAUSED_RECHECK_S
            return
        if len(claimed) < count:
            self.empty.add(q)
        for c in claimed:
            ex = Execution(q, c, Held(c.rand, c.priority, c.entry_id, c.lease))
            if len(self.running) < self.concurrency:
                self._start(ex)
            else:
                self.buffer.append(ex)

    # -- executing ---------------------------------------------------------------------------

    def _start(self, ex: Execution) -> None:
        c = ex.claimed
        ex.started = time.perf_counter()
        m = self.metrics
        m.wait.observe(self._wait_series(ex.queue), max(0.0, time.time() - c.queued_at_us / 1e6))
        task = self._loop.create_task(self._execute(ex))
        self.running[c.rand] = (ex, task)
        slot = math.ceil((ex.started + c.timeout_ms / 1000) * DEADLINE_SLOTS_PER_S)
        ex.deadline_slot = slot
        members = self.deadline_slots.get(slot)
        if members is None:
            members = self.deadline_slots[slot] = set()
            heapq.heappush(self.deadline_order, slot)
        members.add(c.rand)

    def _wait_series(self, queue: str) -> list[float]:
        series = self._wait_children.get(queue)
        if series is None:
            series = self._wait_children[queue] = self.metrics.wait.child(queue)
        return series

    async def _watchdog(self) -> None:
        """Cancel handlers past their timeout (the executor turns that into a failure)."""
        while True:
            await asyncio.sleep(1 / DEADLINE_SLOTS_PER_S)
            now = time.perf_counter() * DEADLINE_SLOTS_PER_S
            while self.deadline_order and self.deadline_order[0] <= now:
                slot = heapq.heappop(self.deadline_order)
                for rand in self.deadline_slots.pop(slot, ()):
                    self.cancel_running(rand, "timeout")

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
        )
        finish: Finish | None = None
        try:
            finish = await self.executor.run(ex, self.registry.get(c.task), ctx)
        finally:
            self.running.pop(c.rand, None)
            members = self.deadline_slots.get(ex.deadline_slot)
            if members is not None:
                members.discard(c.rand)
            if finish is not None:
                self.pending_finish.setdefault(ex.queue, []).append((finish, ex))
                self.finish_event.set()
            while self.buffer and len(self.running) < self.concurrency and not self.stopping:
                self._start(self.buffer.popleft())
            self.room_event.set()

    async def _progress(self, ctx: TaskContext, value: float, message: str | None) -> bool:
        payload = msgspec.json.encode({"value": value, "message": message}).decode()
        return await self.scripts.progress(
            self._qk[ctx.queue],
            ctx.rand,
            ctx.lease,
            payload,
            events_maxlen=self.settings.queues.events_maxlen,
        )

    def cancel_running(self, rand: str, reason: str) -> bool:
        """Cancel a running handler (``cancel``, ``lease_lost``); drop it if only prefetched."""
        entry = self.running.get(rand)
        if entry is not None:
            ex, task = entry
            if ex.cancel_reason is None:
                ex.cancel_reason = reason
                task.cancel()
            return True
        for ex in list(self.buffer):
            if ex.claimed.rand == rand:
                if reason == "cancel":
                    # Never started: finish it as cancelled right away.
                    self.buffer.remove(ex)
                    self.pending_finish.setdefault(ex.queue, []).append(
                        (Finish(ex.held, FinishOutcome.CANCEL), ex)
                    )
                    self.finish_event.set()
                else:
                    self.buffer.remove(ex)
                return True
        return False

    # -- finishing ---------------------------------------------------------------------------

    async def _finish_loop(self) -> None:
        backoff = Backoff()
        while True:
            await self.finish_event.wait()
            self.finish_event.clear()
            self._finisher_idle.clear()
            try:
                await self._flush()
                backoff.reset()
            except RETRYABLE as exc:
                self.metrics.redis_errors.labels("finish").inc()
                delay = backoff.next()
                log.warning("finish_failed", error=str(exc), retry_in_s=delay)
                self.finish_event.set()
                await asyncio.sleep(delay)
            finally:
                if not self.finish_event.is_set():
                    self._finisher_idle.set()

    async def _flush(self) -> None:
        s = self.settings
        batches, self.pending_finish = self.pending_finish, {}
        self.finishing = batches
        try:
            while batches:
                q, items = next(iter(batches.items()))
                statuses = await self.scripts.finish(
                    self._qk[q],
                    [f for f, _ in items],
                    events_maxlen=s.queues.events_maxlen,
                    result_retention_ms=s.tasks.result_retention_s * 1000,
                    retention_ms=s.tasks.retention_s * 1000,
                    dlq_enabled=s.queues.dlq_enabled,
                    dlq_maxlen=s.queues.dlq_maxlen,
                )
                del batches[q]
                self._record(q, items, statuses)
        except BaseException:
            # Outcomes are fenced by their lease: sending them again is safe.
            for q, items in batches.items():
                self.pending_finish.setdefault(q, [])[:0] = items
            raise
        finally:
            self.finishing = {}

    def _record(
        self, queue: str, items: list[tuple[Finish, Execution]], statuses: list[str]
    ) -> None:
        now = time.perf_counter()
        counts: Counter[tuple[str, str]] = Counter()
        lines: list[dict[str, Any]] = []
        m = self.metrics
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
            m.tasks.labels(queue, task, status).inc(n)
            if status == Fence.STALE:
                m.stale_finish.labels(queue).inc(n)
            elif status == "succeeded":
                self.processed += n
            else:
                self.failed += n

    # -- draining ----------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Stop claiming; hand back what never started; let running handlers finish within
        the drain budget; hand back the rest at once; flush every outcome."""
        self.state = "draining"
        self.stopping = True
        t0 = time.monotonic()
        for task in list(self.readers.values()):
            task.cancel()
        await asyncio.gather(*self.readers.values(), return_exceptions=True)
        await self._hand_back_adopted()
        prefetched = list(self.buffer)
        self.buffer.clear()
        await self._release(prefetched, "shutdown")
        running = [task for _, task in self.running.values()]
        log.info(
            "worker_draining",
            running=len(running),
            handed_back=len(prefetched),
            budget_s=self.settings.worker.drain_timeout_s,
        )
        if running:
            await asyncio.wait(running, timeout=self.settings.worker.drain_timeout_s)
        leftover = [ex for ex, _ in self.running.values()]
        if leftover:
            await self._release(leftover, "drain_timeout")
            for ex, task in list(self.running.values()):
                ex.cancel_reason = "drain"
                task.cancel()
            tasks = [t for _, t in self.running.values()]
            if tasks:
                await asyncio.wait(tasks, timeout=5)
        await self._flush_all()
        log.info(
            "worker_drained",
            duration_s=round(time.monotonic() - t0, 3),
            handed_back=len(prefetched) + len(leftover),
        )

    async def _hand_back_adopted(self) -> None:
        for qk in self.queues:
            adopt, self.adopted[qk.queue] = self.adopted[qk.queue], []
            if adopt:
                try:
                    await self.scripts.claim(
                        qk,
                        consumer=self.consumer,
                        count=0,
                        events_maxlen=self.settings.queues.events_maxlen,
                        retention_ms=self.settings.tasks.retention_s * 1000,
                        defaults=self.defaults,
                        adopt=adopt,
                    )
                except RETRYABLE as exc:
                    log.warning("hand_back_failed", queue=qk.queue, error=str(exc))

    async def _release(self, executions: list[Execution], reason: str) -> None:
        by_queue: dict[str, list[Held]] = {}
        for ex in executions:
            by_queue.setdefault(ex.queue, []).append(ex.held)
        for q, held in by_queue.items():
            for i in range(0, len(held), RELEASE_CHUNK):
                chunk = held[i : i + RELEASE_CHUNK]
                try:
                    released = await self.scripts.release(
                        self._qk[q],
                        chunk,
                        events_maxlen=self.settings.queues.events_maxlen,
                        reason=reason,
                    )
                except RETRYABLE as exc:
                    # Not lost: the reaper of a peer takes them after the visibility timeout.
                    log.warning("release_failed", queue=q, count=len(chunk), error=str(exc))
                    continue
                self.metrics.released.labels(q, reason).inc(len(released))

    async def _flush_all(self) -> None:
        """Send every outcome still waiting (the finisher retries on Redis errors)."""
        try:
            async with asyncio.timeout(10):
                while self.pending_finish or not self._finisher_idle.is_set():
                    self.finish_event.set()
                    await asyncio.sleep(0)  # let the finisher pick the batch up
                    await self._finisher_idle.wait()
        except TimeoutError:
            log.warning("outcomes_not_sent", count=sum(map(len, self.pending_finish.values())))


def _error_type(finish: Finish) -> str | None:
    if finish.outcome in {FinishOutcome.RETRY, FinishOutcome.DEAD}:
        return msgspec.json.decode(finish.payload).get("type")  # type: ignore[no-any-return]
    return None


async def _sleep_or_stop(stop_wait: asyncio.Future[Any], delay: float) -> None:
    await asyncio.wait({stop_wait}, timeout=delay)
