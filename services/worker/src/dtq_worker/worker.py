"""The worker process's engine: composes its parts, runs their loops and drains on stop.

Parts, each in its own module and each with one job:

- claimer (:mod:`dtq_worker.claimer`, deciding with :mod:`dtq_worker.claim_plan`): which
  queue to claim from and how many; claims ahead, parks wake-up reads on the idle queues
  (many to a read, :mod:`dtq_worker.wake_reads`) when all are empty.
- running set (:mod:`dtq_worker.running`): the attempts running or prefetched, their
  deadlines, cancelling them.
- finisher (:mod:`dtq_worker.finisher`): outcomes in batches, one finish call per queue.
- heartbeat (:mod:`dtq_worker.heartbeat`): extends the leases of everything held, learns of
  cancellations, stamps the worker registry.
- reclaimer (:mod:`dtq_worker.reclaimer`): takes back the attempts of workers that stopped
  heartbeating.

They share a :class:`dtq_worker.context.WorkerContext` and callables this module hands them;
none reads another's state.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import structlog

from dtq_core.client import Client
from dtq_core.errors import DtqError, ValidationError
from dtq_core.infra.connection import RETRYABLE, connect
from dtq_core.infra.settings import Settings
from dtq_core.names import logical_queue
from dtq_core.protocol.routing import encode_routes, encode_schemas
from dtq_core.protocol.scripts import Held, task_defaults
from dtq_core.protocol.workers import WorkerRecord
from dtq_core.tasks import TaskContext, TaskRegistry, argument_schema
from dtq_core.workflows import Children
from dtq_worker import __version__
from dtq_worker.claim_plan import ClaimPlan, max_parked_reads
from dtq_worker.claimer import WAKE_BLOCK_MS, Claimer, read_slots
from dtq_worker.context import Place, WorkerContext, consumer_name
from dtq_worker.cpus import usable_cpus
from dtq_worker.executor import Execution, Executor
from dtq_worker.finisher import Finisher
from dtq_worker.handler_pool import HandlerPool, HandlerPoolError, targets_of
from dtq_worker.heartbeat import Heartbeat
from dtq_worker.metrics import WorkerMetrics
from dtq_worker.reclaimer import Reclaimer
from dtq_worker.registration import register_queues
from dtq_worker.running import RunningSet
from dtq_worker.tasklog import TaskLog
from dtq_worker.wake_reads import QUEUES_PER_READ

__all__ = ["Worker", "consumer_name"]

log = structlog.get_logger()

WARM_CONNECTIONS = 6
"""Commands a worker has in flight at once in steady state: a claim, a finish, a heartbeat's
extension and registration, the reclaimer, a progress report."""
RELEASE_CHUNK = 200
HANDLER_EXIT_S = 5
"""How long a drain waits for handlers it cancelled past the drain budget to unwind."""
HOST = socket.gethostname()
PID = os.getpid()
"""Read once: a worker process does not move."""


NOT_APPLIED: tuple[type[Exception], ...] = (DtqError, *RETRYABLE)
"""Why a queue configuration declared in code may not be stored (a worker starts anyway)."""


class Worker:
    """One worker process's engine. ``await Worker(...).run(stop)`` until ``stop`` is set.

    Attributes:
        state: ``starting``, ``running`` or ``draining``, as the registry shows it.
    """

    def __init__(
        self,
        settings: Settings,
        registry: TaskRegistry,
        queues: Sequence[str],
        *,
        concurrency: int | None = None,
        metrics: WorkerMetrics | None = None,
        place: Place | None = None,
    ) -> None:
        """Args:
        place: this process's slot under a supervisor (``dtq-worker --processes N``).

        Raises:
            HandlerPoolError: a handler registered with ``executor="process"`` that a handler
                process could not import by name.
        """
        self.settings = settings
        self.registry = registry
        self.concurrency = concurrency or settings.worker.concurrency
        self.place = place
        self.consumer = place.consumer if place else consumer_name(settings.worker.id)
        self.metrics = metrics or WorkerMetrics()
        self.ctx = WorkerContext.create(
            settings,
            queues,
            consumer=self.consumer,
            redis=connect(settings, client_name=f"dtq-worker:{self.consumer}"),
            blocking=connect(
                settings,
                client_name=f"dtq-worker-wake:{self.consumer}",
                socket_timeout=WAKE_BLOCK_MS / 1000 + 5,
            ),
            metrics=self.metrics,
        )
        self.scripts = self.ctx.scripts
        self._client: Client | None = None
        self.state = "starting"
        self.started_at = time.time()
        self.routes = encode_routes(registry)
        self.schemas = encode_schemas({t.name: argument_schema(t) for t in registry})
        """And the JSON Schema of each task's arguments (submits are checked against it)."""
        """What the heartbeat publishes: this worker's tasks and their declared queues."""
        room = asyncio.Event()
        self.pool = self._handler_pool()
        self.executor = Executor(settings, self.consumer, self.concurrency, self.pool)
        self.finisher = Finisher(
            self.ctx,
            TaskLog(
                enabled=settings.observability.log_level in {"DEBUG", "INFO"},
                json=settings.observability.log_json,
            ),
            ended=lambda: self._slot_freed(room),
        )
        self.running = RunningSet(
            concurrency=self.concurrency,
            registry=registry,
            executor=self.executor,
            finisher=self.finisher,
            metrics=self.metrics,
            progress=self._report_progress,
            room=room,
            spawner=self._spawn,
        )
        self.claimer = Claimer(
            self.ctx,
            ClaimPlan(
                self.ctx.queue_names,
                concurrency=self.concurrency,
                batch=max(1, min(settings.worker.effective_claim_batch, self.concurrency)),
                capacity=self.concurrency + settings.worker.effective_prefetch,
                max_parked=max_parked_reads(settings.redis.max_connections),
                per_read=QUEUES_PER_READ,
                slot_of=read_slots(self.ctx),
            ),
            self.running,
            defaults=task_defaults(
                settings.retries.max_attempts,
                settings.tasks.timeout_ms,
                [(t.name, t.max_attempts, t.timeout_s) for t in registry],
            ),
            held=self.held,
            room=room,
        )
        self.heartbeat = Heartbeat(
            self.ctx, held=self.held, cancel=self.running.cancel, record=self.record
        )
        self.reclaimer = Reclaimer(self.ctx)
        self.metrics.concurrency.set(self.concurrency)
        self.metrics.watch(lambda: self.running.running, lambda: self.running.prefetched)

    def _handler_pool(self) -> HandlerPool | None:
        """The handler processes of the tasks registered with ``executor="process"`` (none
        without such tasks): DTQ_WORKER_PROCESS_POOL, or this process's share of the CPUs,
        never more than its concurrency."""
        targets = targets_of(self.registry)
        if not targets:
            return None
        slots = self.place.slots if self.place else 1
        size = self.settings.worker.process_pool or max(1, usable_cpus() // slots)
        obs = self.settings.observability
        return HandlerPool(
            min(size, self.concurrency),
            targets,
            log_level=obs.log_level,
            log_json=obs.log_json,
            replaced=lambda reason: self.metrics.handler_processes_replaced.labels(reason).inc(),
        )

    # -- what the heartbeat publishes --------------------------------------------------------

    def held(self) -> dict[str, list[Held]]:
        """Every attempt this worker holds, by queue: running, prefetched, and done but not
        yet recorded (its outcome waits for, or rides in, a finish call). On a slow link a
        finish can take a while; until it lands the attempt is still ours to keep."""
        out: dict[str, list[Held]] = {q: [] for q in self.ctx.by_name}
        self.running.hold_into(out)
        self.finisher.batches.hold_into(out)
        return out

    def record(self) -> WorkerRecord:
        """This worker's registry record as of now."""
        return WorkerRecord(
            id=self.consumer,
            worker_id=self.settings.worker.id,
            host=HOST,
            pid=PID,
            queues=tuple(self.ctx.queue_names),
            concurrency=self.concurrency,
            inflight=self.running.running,
            prefetched=self.running.prefetched,
            processed=self.finisher.processed,
            failed=self.finisher.failed,
            started_at=int(self.started_at * 1_000_000),
            state=self.state,
            version=__version__,
            routes=self.routes,
            schemas=self.schemas,
            slot=self.place.slot if self.place else 0,
            slots=self.place.slots if self.place else 1,
            restarts=self.place.restarts if self.place else 0,
            supervisor=self.place.supervisor if self.place else 0,
            pool=self.pool.size if self.pool else 0,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set, then drain (DTQ_DRAIN_TIMEOUT_S) and return.

        Raises:
            HandlerPoolError: the handler processes could not start (nothing was claimed).
        """
        self.running.bind(asyncio.get_running_loop())
        if self.pool is not None:
            try:
                await self.pool.start()
            except HandlerPoolError:
                await self.ctx.redis.aclose()
                await self.ctx.blocking.aclose()
                raise
            self.metrics.handler_processes.set(self.pool.size)
        registered = await register_queues(self.ctx, retry=False)
        if registered:
            await self._apply_declared_queues()
        try:
            await self.claimer.follow_partitions()
        except RETRYABLE as exc:  # the follower's next read picks them up
            log.warning("partitions_read_failed", error=str(exc))
        self.state = "running"
        await self._warm_up()
        plan = self.claimer.plan
        log.info(
            "worker_started",
            worker=self.consumer,
            queues=self.ctx.queue_names,
            concurrency=self.concurrency,
            prefetch=plan.capacity - self.concurrency,
            claim_batch=plan.batch,
            tasks=sorted(t.name for t in self.registry),
        )
        heartbeat = self.heartbeat
        try:
            async with asyncio.TaskGroup() as tg:
                # Heartbeats, cancellations and finishing go on while the worker drains.
                background: list[asyncio.Task[Any]] = [
                    tg.create_task(heartbeat.run(), name="dtq-heartbeat"),
                    tg.create_task(heartbeat.listen_cancellations(), name="dtq-cancel-listener"),
                    tg.create_task(self.reclaimer.run(stop), name="dtq-reclaimer"),
                    tg.create_task(self.finisher.run(), name="dtq-finisher"),
                    tg.create_task(self.running.watch_deadlines(), name="dtq-timeouts"),
                    tg.create_task(
                        self.claimer.keep_following_partitions(stop), name="dtq-partitions"
                    ),
                ]
                if not registered:
                    background.append(
                        tg.create_task(register_queues(self.ctx), name="dtq-register-queues")
                    )
                await self.claimer.run(stop)
                await self._drain()
                for task in background:
                    task.cancel()
        finally:
            self.executor.shutdown()
            await self.executor.close()
            await heartbeat.deregister()
            await self.ctx.redis.aclose()
            await self.ctx.blocking.aclose()
            log.info("worker_stopped", worker=self.consumer, processed=self.finisher.processed)

    def _slot_freed(self, room: asyncio.Event) -> None:
        """A finish call landed: queues at their concurrency limit may have room."""
        self.claimer.plan.slot_freed()
        room.set()

    async def _apply_declared_queues(self) -> None:
        """Store the configuration of the served queues declared in code
        (``registry.queue``), as ``dtq queue configure`` would; what cannot be applied is
        logged and the worker starts anyway."""
        from dtq_core.ops.admin import Admin  # noqa: PLC0415 - the admin API, used once

        served = set(self.ctx.served)
        declared = [d for d in self.registry.declared_queues if d.name in served]
        if not declared:
            return
        admin = Admin(self.client)
        for decl in declared:
            try:
                config = await admin.configure(
                    decl.name,
                    partitions=decl.partitions,
                    actor=f"worker:{self.consumer}",
                    **decl.settings,
                )
            except ValidationError as exc:  # fewer partitions than Redis holds: they stay
                log.info("declared_queue_kept", queue=decl.name, reason=str(exc))
            except NOT_APPLIED as exc:
                log.warning(
                    "declared_queue_not_applied",
                    queue=decl.name,
                    error=str(exc),
                    hint="apply it with `dtq queue configure` as a user allowed to write "
                    "queue meta",
                )
            else:
                log.info(
                    "declared_queue_applied", queue=decl.name, **msgspec.structs.asdict(config)
                )

    async def _warm_up(self) -> None:
        """Open the connections the loops will use side by side, then beat once, before the
        first claim. On a slow link each new connection costs round trips of its own; paid
        during the first beat, they would let the first claimed leases expire unextended."""
        try:
            await asyncio.gather(*(self.ctx.redis.ping() for _ in range(WARM_CONNECTIONS)))
            await self.heartbeat.beat()
        except RETRYABLE as exc:
            log.warning("warm_up_failed", error=str(exc))  # the loops retry on their own

    @property
    def client(self) -> Client:
        """A client on the worker's connections (declared queues, handlers' children)."""
        if self._client is None:
            self._client = Client(self.ctx.redis, self.settings)
        return self._client

    def _spawn(self, ctx: TaskContext) -> Children:
        """The children of one attempt, routed and checked through the worker's client."""
        return self.client.workflows.children(ctx.task_id, ctx.task)

    async def _report_progress(self, ctx: TaskContext, value: float, message: str | None) -> bool:
        payload = msgspec.json.encode({"value": value, "message": message}).decode()
        return await self.scripts.progress(
            self.ctx.by_name[ctx.queue],
            ctx.rand,
            ctx.lease,
            payload,
            events_maxlen=self.settings.queues.events_maxlen,
        )

    # -- draining ----------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Stop claiming; hand back what never started; let running handlers finish within
        the drain budget; hand back the rest at once; flush every outcome."""
        self.state = "draining"
        running = self.running
        running.stop_starting()
        t0 = time.monotonic()
        await self.claimer.stop_reading()
        await self.claimer.hand_back_adopted()
        prefetched = running.take_prefetched()
        await self._release(prefetched, "shutdown")
        tasks = running.running_tasks()
        log.info(
            "worker_draining",
            running=len(tasks),
            handed_back=len(prefetched),
            budget_s=self.settings.worker.drain_timeout_s,
        )
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.worker.drain_timeout_s)
        leftover = running.running_executions()
        if leftover:
            await self._release(leftover, "drain_timeout")
            tasks = running.abandon("drain")
            if tasks:
                await asyncio.wait(tasks, timeout=HANDLER_EXIT_S)
        await self.finisher.flush_all()
        log.info(
            "worker_drained",
            duration_s=round(time.monotonic() - t0, 3),
            handed_back=len(prefetched) + len(leftover),
        )

    async def _release(self, executions: list[Execution], reason: str) -> None:
        by_queue: dict[str, list[Held]] = {}
        for ex in executions:
            by_queue.setdefault(ex.queue, []).append(ex.held)
        for q, held in by_queue.items():
            for i in range(0, len(held), RELEASE_CHUNK):
                chunk = held[i : i + RELEASE_CHUNK]
                try:
                    released = await self.scripts.release(
                        self.ctx.by_name[q],
                        chunk,
                        events_maxlen=self.settings.queues.events_maxlen,
                        reason=reason,
                    )
                except RETRYABLE as exc:
                    # Not lost: a peer's reclaimer takes them after the visibility timeout.
                    log.warning("release_failed", queue=q, count=len(chunk), error=str(exc))
                    continue
                self.metrics.released.labels(logical_queue(q), reason).inc(len(released))
