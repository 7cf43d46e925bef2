"""The Python SDK: submit tasks, look them up, wait for outcomes, cancel and retry.

``Client`` is asyncio-native; ``SyncClient`` is the same surface for code without an event
loop. Both go through the same validation as the REST API (:mod:`dtq_core.protocol.submit`) and the
same Lua transitions as the services (:mod:`dtq_core.protocol.scripts`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar, cast

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError, ResponseError

from dtq_core.errors import (
    IdempotencyConflictError,
    InvalidStateError,
    QueueFullError,
    QueueLimitError,
    RedisUnavailableError,
    TaskNotFoundError,
    UnknownQueueError,
    ValidationError,
)
from dtq_core.infra import tracing
from dtq_core.infra.connection import REDIS_DOWN, StreamEntry, answering, connect, unavailable
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import (
    Outcome,
    SubmitResult,
    TaskRecord,
    TaskRequest,
    TaskStatus,
)
from dtq_core.names import make_task_id, split_task_id, valid_name
from dtq_core.protocol.keys import Keys, QueueKeys
from dtq_core.protocol.records import TASK_FIELDS, decode_record
from dtq_core.protocol.routing import Routes, read_routes
from dtq_core.protocol.scripts import Scripts, function_missing
from dtq_core.protocol.submit import Prepared, flatten, new_rands, prepare
from dtq_core.protocol.waits import EventWaiter
from dtq_core.tasks import TaskDef

T = TypeVar("T")

# One submit script call carries at most this many tasks: about 4-5 ms of Redis time, short
# enough not to stall other clients (docs/performance.md: a 500-task script holds Redis ~4-5 ms).
SUBMIT_CHUNK = 500
ROUTES_TTL_S = 5.0
"""How long the client trusts its copy of the workers' routes and of the queue registry; a
miss (a task or queue it does not know) rereads them after half a second."""
ROUTES_RETRY_S = 0.5
_STATUS = {s.value: s for s in TaskStatus}


class TaskHandle:
    """A submitted task. Obtained from :meth:`Client.enqueue`.

    ``trace_id`` is the trace the submit's span belongs to (``None`` when it was not traced).
    """

    __slots__ = ("_client", "created", "id", "queue", "submitted_status", "trace_id")

    def __init__(
        self,
        client: Client,
        task_id: str,
        queue: str,
        status: TaskStatus,
        created: bool,
        *,
        trace_id: str | None = None,
    ) -> None:
        self._client = client
        self.id = task_id
        self.queue = queue
        self.submitted_status = status
        self.created = created
        self.trace_id = trace_id

    def __repr__(self) -> str:
        return f"TaskHandle(id={self.id!r}, status={self.submitted_status.value!r})"

    async def status(self) -> TaskStatus:
        """The task's current status.

        Raises:
            TaskNotFoundError: the record expired.
        """
        return (await self.info()).status

    async def info(self) -> TaskRecord:
        """The whole task record."""
        record = await self._client.get(self.id)
        if record is None:
            raise TaskNotFoundError(f"task {self.id} not found", task_id=self.id)
        return record

    async def result(self, timeout: float | None = None) -> Outcome:
        """Wait until the task ends and return how it ended.

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        return await self._client.wait(self.id, timeout=timeout)

    async def cancel(self) -> TaskStatus:
        """Cancel the task (see :meth:`Client.cancel`)."""
        return await self._client.cancel(self.id)


class Client:
    """Asyncio client of a dtq deployment.

    Example::

        async with Client.from_url("redis://localhost:6379/0") as client:
            handle = await client.enqueue("emails.send", args=["a@b.c"], queue="emails")
            outcome = await handle.result(timeout=10)
    """

    def __init__(self, redis: aioredis.Redis, settings: Settings, *, owns_redis: bool = False):
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self.scripts = Scripts(redis)
        self._owns_redis = owns_redis
        self._known_queues: set[str] = set()
        self._waiter: EventWaiter | None = None
        self._known_queues_at = 0.0
        self._routes = Routes()
        self._routes_at = -ROUTES_TTL_S

    @property
    def waiter(self) -> EventWaiter:
        """The one reader of event streams behind every :meth:`wait` of this client (made on
        first use; its connection is not one of the pool's)."""
        if self._waiter is None:
            self._waiter = EventWaiter(self.redis)
        return self._waiter

    @classmethod
    def from_url(cls, url: str, **settings: Any) -> Client:
        """A client with its own connection pool; ``settings`` override ``DTQ_*`` defaults."""
        resolved = load_settings({}, redis_url=url, **settings)
        return cls(connect(resolved, client_name="dtq-sdk"), resolved, owns_redis=True)

    @classmethod
    def from_settings(cls, settings: Settings, *, client_name: str = "dtq-sdk") -> Client:
        return cls(connect(settings, client_name=client_name), settings, owns_redis=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the waits' reader (its own connection) and, if the client made it, the pool."""
        if self._waiter is not None:
            await self._waiter.aclose()
            self._waiter = None
        if self._owns_redis:
            await self.redis.aclose()

    def queue_keys(self, queue: str) -> QueueKeys:
        return self.keys.queue(queue)

    # -- submit ---------------------------------------------------------------------------

    async def enqueue(
        self,
        task: str | TaskDef,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay_s: float | None = None,
        eta: datetime | None = None,
        max_attempts: int | None = None,
        timeout_s: float | None = None,
        ttl_s: float | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TaskHandle:
        """Submit one task.

        Args:
            task: the task name, or a registered :class:`TaskDef` (its queue, priority and
                defaults apply).
            args, kwargs: the handler's arguments (JSON-encodable).
            queue: the queue; defaults to the task definition's, else to the queue the live
                workers register the task on, else ``default``.
            priority: 0-9, 9 runs first; default 5.
            delay_s, eta: run no earlier than this (one of them).
            max_attempts, timeout_s: override the defaults.
            ttl_s: expire the task if it has not started within this many seconds.
            idempotency_key: the same key with the same request returns the original task.
            metadata: free-form JSON object stored with the task.

        Raises:
            ValidationError: bad input (nothing written).
            UnknownTaskError: no live worker of the queue handles the task.
            UnknownQueueError: no worker serves the queue and no admin created it.
            QueueLimitError: the queue would be new and the registry is full.
            QueueFullError: admission control refused it.
            IdempotencyConflictError: the key was used with a different request.
            RedisUnavailableError: Redis did not answer.
        """
        request, defaults = self._request(
            task,
            args,
            kwargs,
            queue=queue,
            priority=priority,
            delay_s=delay_s,
            eta=eta,
            max_attempts=max_attempts,
            timeout_s=timeout_s,
            ttl_s=ttl_s,
            idempotency_key=idempotency_key,
            metadata=metadata,
        )
        routed = (await self._route([request]))[0]
        if isinstance(routed, Exception):
            raise routed
        request = routed
        with tracing.send_span(request.task, cast(str, request.queue)) as span:
            prepared = prepare(
                request,
                self.settings,
                new_rands(1)[0],
                headers=span.headers if span is not None else "",
                defaults=defaults,
            )
            result = (await self._submit([prepared]))[0]
            if span is not None:
                span.done(result)
        if isinstance(result, Exception):
            raise result
        trace_id = span.trace_id if span is not None else None
        return TaskHandle(
            self, result.id, result.queue, result.status, result.created, trace_id=trace_id
        )

    async def enqueue_many(
        self, requests: Iterable[TaskRequest | Mapping[str, Any]]
    ) -> list[TaskHandle | Exception]:
        """Submit many tasks in one round trip (tasks of several queues included).

        Each request is a :class:`TaskRequest` or a mapping of the same fields. Returns one
        entry per request, in order: a :class:`TaskHandle`, or the exception that refused that
        one task (:class:`ValidationError`, :class:`QueueFullError`, ...). Invalid items are
        refused before anything is written; valid ones are submitted.

        Raises:
            RedisUnavailableError: Redis did not answer (nothing is known to be written).
        """
        reqs: list[TaskRequest | Exception] = []
        for item in requests:
            try:
                reqs.append(
                    item
                    if isinstance(item, TaskRequest)
                    else msgspec.convert(dict(item), TaskRequest)
                )
            except (msgspec.ValidationError, TypeError, ValueError) as exc:
                reqs.append(ValidationError(f"invalid task request: {exc}"))
        reqs = await self._route(reqs)
        rands = new_rands(len(reqs))
        prepared: list[Prepared | Exception] = []
        with tracing.batch_span(reqs) as batch:
            for req, rand in zip(reqs, rands, strict=True):
                if isinstance(req, Exception):
                    prepared.append(req)
                    continue
                try:
                    if batch is None:
                        prepared.append(prepare(req, self.settings, rand))
                    else:
                        with batch.create(req.task, req.queue or "", rand) as headers:
                            prepared.append(prepare(req, self.settings, rand, headers=headers))
                except ValidationError as exc:
                    prepared.append(exc)
            valid = [p for p in prepared if isinstance(p, Prepared)]
            submitted = await self._submit(valid) if valid else []
            if batch is not None:
                batch.done(submitted)
        trace_id = batch.trace_id if batch is not None else None
        results = iter(submitted)
        out: list[TaskHandle | Exception] = []
        for p in prepared:
            if isinstance(p, Exception):
                out.append(p)
                continue
            res = next(results)
            out.append(
                res
                if isinstance(res, Exception)
                else TaskHandle(self, res.id, res.queue, res.status, res.created, trace_id=trace_id)
            )
        return out

    def _request(
        self,
        task: str | TaskDef,
        args: Sequence[Any] | None,
        kwargs: Mapping[str, Any] | None,
        **options: Any,
    ) -> tuple[TaskRequest, tuple[int | None, float | None]]:
        defaults: tuple[int | None, float | None] = (None, None)
        if isinstance(task, TaskDef):
            options["queue"] = options["queue"] or task.queue
            if options["priority"] is None:
                options["priority"] = task.priority
            defaults = (task.max_attempts, task.timeout_s)
            name = task.name
        else:
            name = task
        if options["priority"] is None:
            options["priority"] = 5
        try:
            request = TaskRequest(
                task=name,
                args=list(args or []),
                kwargs=dict(kwargs or {}),
                **options,
            )
        except TypeError as exc:
            raise ValidationError(str(exc)) from None
        return request, defaults

    @answering
    async def route_for(self, task: str, queue: str | None = None, *, enforce: bool = True) -> str:
        """The queue a submit of ``task`` (into ``queue``, or none) goes to, by the rules of
        :meth:`enqueue`, without submitting anything: what a schedule is checked with.

        Args:
            enforce: refuse as a submit would; False only resolves the queue.

        Raises:
            UnknownTaskError: no live worker of the queue handles ``task``.
            UnknownQueueError: the queue is not in the queue registry.
        """
        routed = (await self._route([TaskRequest(task=task, queue=queue)]))[0]
        if isinstance(routed, TaskRequest):
            resolved = cast(str, routed.queue)
        elif enforce:
            raise routed
        else:
            resolved = queue or self._routes.default_queue(task)
        if enforce and self.settings.queues.reject_unknown_queues and _names_valid(task, resolved):
            refusal = (await self._admit_queues([resolved])).get(resolved)
            if refusal is not None:
                raise refusal
        return resolved

    async def _fresh_routes(self, *, miss: bool) -> Routes:
        """The workers' routes, reread when older than ROUTES_TTL_S (or ROUTES_RETRY_S after a
        miss, so a worker that registered a moment ago is not refused)."""
        age = time.monotonic() - self._routes_at
        if age > ROUTES_TTL_S or (miss and age > ROUTES_RETRY_S):
            self._routes = await read_routes(self.redis, self.keys)
            self._routes_at = time.monotonic()
        return self._routes

    async def _route(
        self, requests: Sequence[TaskRequest | Exception]
    ) -> list[TaskRequest | Exception]:
        """Give each request without a queue its task's registered queue, and refuse those
        whose queue's live workers do not handle their task (:class:`UnknownTaskError`)."""
        if not self.settings.tasks.reject_unknown_tasks:
            return [
                r
                if isinstance(r, Exception) or r.queue is not None
                else msgspec.structs.replace(r, queue="default")
                for r in requests
            ]
        wanted = [r for r in requests if isinstance(r, TaskRequest)]
        if not wanted:
            return list(requests)
        try:
            routes = await self._fresh_routes(miss=False)
            if any(_misses(routes, r) for r in wanted):
                routes = await self._fresh_routes(miss=True)
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc
        out: list[TaskRequest | Exception] = []
        for r in requests:
            if isinstance(r, Exception):
                out.append(r)
                continue
            queue = r.queue if r.queue is not None else routes.default_queue(r.task)
            routed = r if r.queue is not None else msgspec.structs.replace(r, queue=queue)
            # Malformed names are refused by prepare(), with the message about the name.
            refusal = routes.refusal(r.task, queue) if _names_valid(r.task, queue) else None
            out.append(refusal or routed)
        return out

    async def _admit_queues(self, queues: Iterable[str]) -> dict[str, Exception]:
        """Refusals of the queues a submit may not use: not in the queue registry (unless
        DTQ_REJECT_UNKNOWN_QUEUES=false, when the registry takes them up to DTQ_MAX_QUEUES).

        Known names are cached for ROUTES_TTL_S, so a submit costs no extra round trip and a
        queue an admin deleted is refused again within that time.
        """
        if time.monotonic() - self._known_queues_at > ROUTES_TTL_S:
            self._known_queues.clear()
            self._known_queues_at = time.monotonic()
        new = [q for q in queues if q not in self._known_queues]
        if not new:
            return {}
        # The queue registry is a global key: single-key commands, before the submit, so a
        # queue is always registered before it holds a task.
        async with self.redis.pipeline(transaction=False) as pipe:
            for q in new:
                await pipe.sismember(self.keys.queues, q)
            member = [bool(m) for m in await pipe.execute()]
        absent = [q for q, m in zip(new, member, strict=True) if not m]
        self._known_queues.update(q for q, m in zip(new, member, strict=True) if m)
        if not absent:
            return {}
        refused: dict[str, Exception] = {}
        if self.settings.queues.reject_unknown_queues:
            # A queue a live worker serves is deliberate, even if an admin deleted it since.
            served = (await self._fresh_routes(miss=True)).served
            refused = {q: self._unknown_queue(q) for q in absent if q not in served}
            absent = [q for q in absent if q in served]
            if not absent:
                return refused
        limit = self.settings.queues.max_queues
        flags = await self.scripts.register_queues(self.keys.queues, absent, limit)
        self._known_queues.update(q for q, ok in zip(absent, flags, strict=True) if ok)
        refused.update(
            (q, queue_limit(q, limit)) for q, ok in zip(absent, flags, strict=True) if not ok
        )
        return refused

    def forget_queue(self, queue: str) -> None:
        """Drop ``queue`` from the cache of registered queues (it was deleted)."""
        self._known_queues.discard(queue)

    def _unknown_queue(self, queue: str) -> UnknownQueueError:
        return UnknownQueueError(
            f"queue {queue!r} does not exist: a queue exists once a worker serving it has "
            f"started, or an admin created it (POST /api/v1/queues, `dtq queue create {queue}`)",
            field="queue",
            queue=queue,
        )

    async def _submit(self, prepared: Sequence[Prepared]) -> list[SubmitResult | Exception]:
        try:
            refusals = await self._admit_queues(dict.fromkeys(p.queue for p in prepared))
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc
        except OutOfMemoryError as exc:
            raise RedisUnavailableError(
                f"Redis is full (maxmemory) and refused to register the queue: {exc}"
            ) from exc
        if refusals:
            accepted = [p for p in prepared if p.queue not in refusals]
            results = iter(await self._submit(accepted) if accepted else [])
            return [refusals[p.queue] if p.queue in refusals else next(results) for p in prepared]
        by_queue: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(prepared):
            by_queue[p.queue].append(i)
        s = self.settings
        head = [
            s.queues.max_depth,
            s.tasks.retention_s * 1000,
            s.tasks.idem_ttl_s * 1000,
            s.queues.events_maxlen,
        ]
        calls: list[tuple[str, list[int]]] = []
        try:
            batches: list[tuple[QueueKeys, list[Any]]] = []
            for queue, idxs in by_queue.items():
                qk = self.queue_keys(queue)
                for start in range(0, len(idxs), SUBMIT_CHUNK):
                    chunk = idxs[start : start + SUBMIT_CHUNK]
                    batches.append((qk, flatten([prepared[i] for i in chunk])))
                    calls.append((queue, chunk))
            if len(batches) == 1:
                replies = [await self.scripts.submit_call(*batches[0], head=head)]
            else:
                replies = await self._submit_pipeline(batches, head)
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc
        except OutOfMemoryError as exc:
            # The submit function is refused before its first write: nothing was stored.
            raise RedisUnavailableError(
                f"Redis is full (maxmemory) and refused the submit whole: {exc}"
            ) from exc
        out: list[SubmitResult | Exception] = [Exception("unreachable")] * len(prepared)
        for (queue, chunk), reply in zip(calls, replies, strict=True):
            for j, i in enumerate(chunk):
                outcome, rand, status = reply[3 * j : 3 * j + 3]
                task_id = make_task_id(queue, rand)
                out[i] = self._submit_result(queue, task_id, outcome, status)
        return out

    async def _submit_pipeline(
        self, batches: list[tuple[QueueKeys, list[Any]]], head: list[Any]
    ) -> list[Any]:
        """One submit call per batch, in one pipeline (one round trip for any number of queues).

        A missing function library fails every call of the pipeline before any of them runs,
        so loading it and sending the pipeline again submits nothing twice.
        """
        for attempt in range(2):
            async with self.redis.pipeline(transaction=False) as pipe:
                for qk, items in batches:
                    await self.scripts.submit_call(qk, items, head=head, client=pipe)
                try:
                    return await pipe.execute()
                except ResponseError as exc:
                    if attempt or not function_missing(exc):
                        raise
            await self.scripts.reload()
        raise AssertionError("unreachable")

    def _submit_result(
        self, queue: str, task_id: str, outcome: str, status: str
    ) -> SubmitResult | Exception:
        if outcome == "new":
            return SubmitResult(id=task_id, queue=queue, status=_STATUS[status])
        if outcome == "dup":
            return SubmitResult(id=task_id, queue=queue, status=_STATUS[status], created=False)
        if outcome == "conflict":
            return IdempotencyConflictError(
                f"the idempotency key was already used with a different request (task {task_id})",
                task_id=task_id,
            )
        return QueueFullError(
            f"queue {queue!r} holds DTQ_MAX_QUEUE_DEPTH={self.settings.queues.max_depth} "
            "waiting tasks (delayed ones included); retry later",
            queue=queue,
            limit=self.settings.queues.max_depth,
        )

    # -- inspect ----------------------------------------------------------------------------

    def _locate(self, task_id: str) -> tuple[QueueKeys, str]:
        parts = split_task_id(task_id)
        if parts is None:
            raise TaskNotFoundError(f"{task_id!r} is not a dtq task id", task_id=task_id)
        return self.queue_keys(parts[0]), parts[1]

    @answering
    async def get(self, task_id: str) -> TaskRecord | None:
        """The task record, or ``None`` when no such task exists (or its record expired)."""
        try:
            qk, rand = self._locate(task_id)
        except TaskNotFoundError:
            return None
        values = await self.redis.hmget(qk.task(rand), list(TASK_FIELDS))
        return decode_record(qk.queue, rand, cast(list[str | None], values))

    @answering
    async def wait(self, task_id: str, timeout: float | None = None) -> Outcome:
        """Wait for the task's outcome without polling and without holding a connection.

        The wait is registered with the client's one reader of the event streams
        (:class:`~dtq_core.protocol.waits.EventWaiter`), which wakes it when the task's terminal
        event is written; only the short reads of the stream's tail and the record use the pool.

        Raises:
            TaskNotFoundError: no such task.
            TimeoutError: not finished within ``timeout`` seconds.
        """
        qk, rand = self._locate(task_id)
        if timeout is not None and timeout <= 0:  # a look, not a wait: no reader needed
            record = await self.get(task_id)
            if record is None:
                raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
            if record.status.terminal:
                return _outcome(record)
            raise TimeoutError(f"task {task_id} did not finish within {timeout} s")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Read the stream's tail first, then the record: an outcome written in between
            # comes after the tail, so the reader finds it, never misses it.
            tail = cast(list[StreamEntry], await self.redis.xrevrange(qk.events, count=1))
            since = tail[0][0] if tail else "0-0"
            async with self.waiter.watch(qk.events, rand, since) as ended:
                record = await self.get(task_id)
                if record is None:
                    raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
                if record.status.terminal:
                    return _outcome(record)
                remaining = None if deadline is None else deadline - time.monotonic()
                try:
                    async with asyncio.timeout(remaining):
                        await ended
                except TimeoutError:
                    raise TimeoutError(
                        f"task {task_id} did not finish within {timeout} s"
                    ) from None
            # A terminal event: read the record again (a retry may have requeued it since).

    @answering
    async def cancel(self, task_id: str) -> TaskStatus:
        """Cancel a task that has not finished.

        Queued and scheduled tasks are cancelled at once; a running task's worker is told to
        cancel its handler (the status stays ``running`` until the handler stops).

        Returns:
            The status after the call: ``cancelled``, or ``running`` for a requested cancel.

        Raises:
            TaskNotFoundError: no such task.
            InvalidStateError: the task already ended.
        """
        qk, rand = self._locate(task_id)
        outcome, status = await self.scripts.cancel(
            qk,
            rand,
            events_maxlen=self.settings.queues.events_maxlen,
            retention_ms=self.settings.tasks.retention_s * 1000,
            channel=self.keys.cancel_channel,
        )
        if outcome == "not_found":
            raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
        if outcome == "final":
            raise InvalidStateError(
                f"task {task_id} already ended ({status}); nothing to cancel",
                task_id=task_id,
                status=status,
            )
        return TaskStatus(status)

    @answering
    async def retry(self, task_id: str) -> TaskStatus:
        """Run a dead or failed task again (its attempt budget starts over).

        Raises:
            TaskNotFoundError: no such task.
            InvalidStateError: the task is not dead or failed.
        """
        qk, rand = self._locate(task_id)
        (status,) = await self.scripts.requeue(
            qk,
            [rand],
            events_maxlen=self.settings.queues.events_maxlen,
            retention_ms=self.settings.tasks.retention_s * 1000,
        )
        if status == "":
            raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
        if status != "requeued":
            raise InvalidStateError(
                f"task {task_id} is {status}; only dead or failed tasks can be retried",
                task_id=task_id,
                status=status,
            )
        return TaskStatus.QUEUED

    def handle(self, task_id: str) -> TaskHandle:
        """A handle for a task id obtained elsewhere (REST, logs)."""
        qk, _ = self._locate(task_id)
        return TaskHandle(self, task_id, qk.queue, TaskStatus.QUEUED, created=False)


def queue_limit(queue: str, limit: int) -> QueueLimitError:
    """The refusal of a new queue by a full queue registry."""
    return QueueLimitError(
        f"queue {queue!r} cannot be created: the queue registry holds DTQ_MAX_QUEUES={limit} "
        "queues; delete unused ones (DELETE /api/v1/queues/{q}, `dtq queue delete`) or raise "
        "the limit",
        queue=queue,
        limit=limit,
    )


def _names_valid(task: object, queue: object) -> bool:
    """Whether both names are well-formed (a TaskRequest built in Python is not type-checked)."""
    return all(isinstance(n, str) and valid_name(n) for n in (task, queue))


def _misses(routes: Routes, request: TaskRequest) -> bool:
    """Whether ``routes`` would refuse ``request`` or lacks its task (worth a reread)."""
    queue = request.queue if request.queue is not None else routes.default_queue(request.task)
    return request.task not in routes.declared or routes.refusal(request.task, queue) is not None


def _outcome(record: TaskRecord) -> Outcome:
    return Outcome(
        id=record.id,
        status=record.status,
        attempts=record.attempts,
        result=record.result,
        result_truncated=record.result_truncated,
        error=record.errors[-1] if record.errors and record.status != "succeeded" else None,
    )


class SyncTaskHandle:
    """:class:`TaskHandle` for :class:`SyncClient`."""

    __slots__ = ("_handle", "_sync")

    def __init__(self, sync: SyncClient, handle: TaskHandle) -> None:
        self._sync = sync
        self._handle = handle

    @property
    def id(self) -> str:
        return self._handle.id

    @property
    def queue(self) -> str:
        return self._handle.queue

    @property
    def created(self) -> bool:
        return self._handle.created

    @property
    def trace_id(self) -> str | None:
        return self._handle.trace_id

    def status(self) -> TaskStatus:
        return self._sync._run(self._handle.status())

    def info(self) -> TaskRecord:
        return self._sync._run(self._handle.info())

    def result(self, timeout: float | None = None) -> Outcome:
        return self._sync._run(self._handle.result(timeout))

    def cancel(self) -> TaskStatus:
        return self._sync._run(self._handle.cancel())


class SyncClient:
    """The :class:`Client` surface for code without an event loop (thread-safe).

    It runs a private event loop in a background thread; every call blocks until done.
    """

    def __init__(self, url: str, **settings: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dtq-sync", daemon=True)
        self._thread.start()
        self._client = self._run(self._make(url, settings))

    @classmethod
    def from_url(cls, url: str, **settings: Any) -> SyncClient:
        return cls(url, **settings)

    @staticmethod
    async def _make(url: str, settings: dict[str, Any]) -> Client:
        return Client.from_url(url, **settings)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def enqueue(
        self,
        task: str | TaskDef,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> SyncTaskHandle:
        """See :meth:`Client.enqueue`."""
        return SyncTaskHandle(self, self._run(self._client.enqueue(task, args, kwargs, **options)))

    def enqueue_many(
        self, requests: Iterable[TaskRequest | Mapping[str, Any]]
    ) -> list[SyncTaskHandle | Exception]:
        """See :meth:`Client.enqueue_many`."""
        results = self._run(self._client.enqueue_many(list(requests)))
        return [SyncTaskHandle(self, r) if isinstance(r, TaskHandle) else r for r in results]

    def get(self, task_id: str) -> TaskRecord | None:
        return self._run(self._client.get(task_id))

    def wait(self, task_id: str, timeout: float | None = None) -> Outcome:
        return self._run(self._client.wait(task_id, timeout))

    def cancel(self, task_id: str) -> TaskStatus:
        return self._run(self._client.cancel(task_id))

    def retry(self, task_id: str) -> TaskStatus:
        return self._run(self._client.retry(task_id))
