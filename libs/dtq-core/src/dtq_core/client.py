"""The Python SDK's asyncio client: submit tasks, look them up, wait for outcomes, cancel and
retry.

``Client`` is asyncio-native; :class:`~dtq_core.sync.SyncClient` is the same surface for code
without an event loop. Every submit takes the one path of :mod:`dtq_core.submitter` (the same
validation as the REST API); lookups and steering call the same Redis functions as the services
(:mod:`dtq_core.protocol.scripts`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, overload

import redis.asyncio as aioredis

from dtq_core.errors import (
    BatchRefusedError,
    InvalidStateError,
    TaskNotFoundError,
)
from dtq_core.handles import TaskHandle
from dtq_core.infra.connection import answering, connect
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import Outcome, SubmitResult, TaskRecord, TaskRequest, TaskStatus
from dtq_core.protocol.keys import Keys, QueueKeys
from dtq_core.protocol.outcomes import CancelOutcome, RequeueOutcome
from dtq_core.protocol.scripts import Scripts
from dtq_core.protocol.waits import EventWaiter
from dtq_core.protocol.workflows import Expr, Policy
from dtq_core.reader import TaskReader
from dtq_core.router import Router
from dtq_core.submitter import Submitter, as_request
from dtq_core.tasks import Task, TaskDef, definition_of, request_of
from dtq_core.workflows import Batch, WorkflowHandle, Workflows


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
        self.router = Router(redis, self.keys, self.scripts, settings)
        self.submitter = Submitter(redis, self.keys, self.scripts, settings, self.router)
        self.reader = TaskReader(redis, self.keys, settings.observability.trace_url)
        self.workflows = Workflows(
            redis=redis,
            keys=self.keys,
            scripts=self.scripts,
            settings=settings,
            router=self.router,
            submitter=self.submitter,
        )
        self._owns_redis = owns_redis

    @property
    def waiter(self) -> EventWaiter:
        """The one reader of event streams behind every :meth:`wait` of this client (made on
        first use; its connection is not one of the pool's)."""
        return self.reader.waiter

    @classmethod
    def from_url(cls, url: str, **settings: Any) -> Client:
        """A client with its own connection pool for Redis at ``url``.

        It reads no ``DTQ_*`` variable: every setting is its default unless given here by its
        flat name (``namespace="jobs"``, ``max_queue_depth=0``; docs/configuration.md). To
        configure it from the environment as the services are, use :meth:`from_env`.
        """
        resolved = load_settings({}, redis_url=url, **settings)
        return cls(connect(resolved, client_name="dtq-sdk"), resolved, owns_redis=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **settings: Any) -> Client:
        """A client configured as the services are: from the ``DTQ_*`` variables of ``env``
        (default: the process environment; ``DTQ_REDIS_URL``, ``DTQ_NAMESPACE``, ...), with
        ``settings`` (flat names) winning over them.

        Raises:
            SettingsError: a variable that is not a dtq setting, or a bad value; naming it.
        """
        resolved = load_settings(os.environ if env is None else env, **settings)
        return cls(connect(resolved, client_name="dtq-sdk"), resolved, owns_redis=True)

    @classmethod
    def from_settings(cls, settings: Settings, *, client_name: str = "dtq-sdk") -> Client:
        """A client with its own connection pool, for ``settings``."""
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
        await self.reader.aclose()
        if self._owns_redis:
            await self.redis.aclose()

    def queue_keys(self, queue: str) -> QueueKeys:
        """The key names of ``queue``."""
        return self.keys.queue(queue)

    # -- submit ---------------------------------------------------------------------------

    @overload
    async def submit(
        self, requests: TaskRequest, *, defaults: TaskDef | None = None
    ) -> TaskHandle[Any]: ...
    @overload
    async def submit(
        self,
        requests: Iterable[TaskRequest | Mapping[str, Any]],
        *,
        defaults: TaskDef | None = None,
    ) -> list[TaskHandle[Any] | Exception]: ...
    async def submit(
        self,
        requests: TaskRequest | Iterable[TaskRequest | Mapping[str, Any]],
        *,
        defaults: TaskDef | None = None,
    ) -> TaskHandle[Any] | list[TaskHandle[Any] | Exception]:
        """Submit one task, or a batch of them in one round trip (tasks of several queues
        included). Every other way to submit (``enqueue``, REST, the CLI, schedules) ends here.

        Args:
            requests: one :class:`TaskRequest`, or many (each a :class:`TaskRequest` or a
                mapping of the same fields).
            defaults: a registered task definition whose ``max_attempts`` and ``timeout_s``
                apply to requests that set none.

        Returns:
            For one request, its :class:`TaskHandle`. For many, one entry per request, in
            order: a :class:`TaskHandle`, or the exception that refused that task (invalid
            items are refused before anything is written; the valid ones are submitted).

        Raises:
            DtqError: for one request, what refused it (:class:`ValidationError`: nothing
                written; :class:`UnknownTaskError`, :class:`UnknownQueueError`,
                :class:`QueueLimitError`, :class:`QueueFullError`,
                :class:`IdempotencyConflictError`).
            RedisUnavailableError: Redis did not answer (nothing is known to be written).
        """
        if isinstance(requests, TaskRequest):
            one = await self.submitter.submit_one(requests, defaults)
            (result,) = one.results
            if isinstance(result, Exception):
                raise result
            return self._handle_of(result, one.trace_id)
        many = await self.submitter.submit_many([as_request(r) for r in requests], defaults)
        return [
            r if isinstance(r, Exception) else self._handle_of(r, many.trace_id)
            for r in many.results
        ]

    def _handle_of(self, result: SubmitResult, trace_id: str | None) -> TaskHandle[Any]:
        return TaskHandle(
            self,
            result.id,
            result.queue,
            result.status,
            result.created,
            trace_id=trace_id,
            dedup=result.dedup,
        )

    async def enqueue(
        self,
        task: str | TaskDef | Task[Any, Any],
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
        dedup: str | None = None,
        dedup_key: str | None = None,
        debounce_s: float | None = None,
        throttle_s: float | None = None,
        group: str | None = None,
    ) -> TaskHandle[Any]:
        """Submit one task (:meth:`submit` of the :class:`TaskRequest` these options make).

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
            dedup, dedup_key: ``until_finished`` (while a task of the key is not finished,
                return it), ``debounce`` with ``debounce_s`` (replace the waiting task's
                arguments; it runs ``debounce_s`` after the last submit) or ``throttle`` with
                ``throttle_s`` (at most one task of the key per window); the handle's
                ``dedup`` says what happened (docs/flow-control.md, "Deduplication").
            group: the task's group (``"customer:42"``): the groups of a queue take turns and
                group limits apply to each (docs/flow-control.md, "Groups"); a definition
                registered with ``group_by`` takes it from that keyword argument.

        Raises:
            The errors of :meth:`submit` for one request.
        """
        request = request_of(
            task,
            args,
            kwargs,
            queue=queue,
            priority=priority,
            group=group,
            delay_s=delay_s,
            eta=eta,
            max_attempts=max_attempts,
            timeout_s=timeout_s,
            ttl_s=ttl_s,
            idempotency_key=idempotency_key,
            metadata=metadata,
            dedup=dedup,
            dedup_key=dedup_key,
            debounce_s=debounce_s,
            throttle_s=throttle_s,
        )
        return await self.submit(request, defaults=definition_of(task))

    @overload
    async def enqueue_many(
        self,
        requests: Iterable[TaskRequest | Mapping[str, Any]],
        *,
        return_exceptions: Literal[False] = False,
    ) -> list[TaskHandle[Any]]: ...
    @overload
    async def enqueue_many(
        self, requests: Iterable[TaskRequest | Mapping[str, Any]], *, return_exceptions: bool
    ) -> list[TaskHandle[Any] | Exception]: ...
    async def enqueue_many(
        self,
        requests: Iterable[TaskRequest | Mapping[str, Any]],
        *,
        return_exceptions: bool = False,
    ) -> list[TaskHandle[Any]] | list[TaskHandle[Any] | Exception]:
        """Submit many tasks in one round trip: :meth:`submit` of a batch.

        Args:
            return_exceptions: return one entry per request, its handle or the error that
                refused it (as ``asyncio.gather`` does), instead of raising.

        Returns:
            The handles, in order (every task was submitted).

        Raises:
            BatchRefusedError: some tasks were refused (a full queue, a bad item, an unknown
                queue) and the others submitted: the error's ``accepted`` and ``refused`` say
                which; nothing is lost unseen.
            RedisUnavailableError: Redis did not answer (nothing is known to be written).
        """
        results = await self.submit(list(requests))
        if not return_exceptions and any(isinstance(r, Exception) for r in results):
            raise BatchRefusedError(results)
        return results

    async def enqueue_workflow(
        self, workflow: Expr, *, name: str | None = None, on_failure: Policy = "fail"
    ) -> WorkflowHandle:
        """Submit a workflow made of :func:`~dtq_core.step`, :func:`~dtq_core.chain`,
        :func:`~dtq_core.group` and :func:`~dtq_core.chord` (docs/workflows.md): its first
        steps start at once, each later one when the steps it waits for have ended.

        Args:
            name: shown in lists and on the dashboard.
            on_failure: what a failed step does (a step may say otherwise): ``fail`` (the
                workflow fails, steps not started are cancelled), ``continue`` (later steps
                run, receiving its error value; the workflow ends failed) or ``ignore``
                (they receive ``None``).

        Raises:
            ValidationError: the definition or one of its steps is refused (the message names
                the step); nothing is written.
            UnknownTaskError, UnknownQueueError: as :meth:`submit`.
            RedisUnavailableError: Redis did not answer.
        """
        return await self.workflows.submit(workflow, name=name, on_failure=on_failure)

    def workflow(self, workflow_id: str) -> WorkflowHandle:
        """A handle for a workflow id obtained elsewhere (REST, logs)."""
        return self.workflows.handle(workflow_id)

    def batch(
        self,
        *,
        on_success: Expr | None = None,
        on_complete: Expr | None = None,
        name: str | None = None,
    ) -> Batch:
        """A new batch (docs/workflows.md, "Batches"): tasks added to it over time
        (:meth:`Batch.add <dtq_core.workflows.Batch.add>`) are counted as they end, and
        when it is sealed and all of them have ended, ``on_success`` runs once if every one
        succeeded and ``on_complete`` runs once whatever happened. Each callback is one
        :func:`~dtq_core.step`; it receives ``{"batch_id", "total", "succeeded", "failed"}``
        first in its arguments (unless ``pass_result=False``).

        ``batch = await client.batch(...)`` creates it open (seal it with ``await
        batch.seal()``, from any process: :meth:`batch_of`); ``async with client.batch(...)
        as batch:`` seals it when the block ends, and cancels it if the block raises.
        """
        return Batch(self.workflows, on_success=on_success, on_complete=on_complete, name=name)

    def batch_of(self, batch_id: str) -> Batch:
        """A handle for a batch created elsewhere: add to it, seal it, read its counts."""
        return self.workflows.batch(batch_id)

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
        return await self.router.queue_for(task, queue, enforce=enforce)

    def forget_queue(self, queue: str) -> None:
        """Drop ``queue`` from the cache of registered queues (it was deleted)."""
        self.router.forget(queue)

    # -- inspect ----------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskRecord | None:
        """The task record, or ``None`` when no such task exists (or its record expired)."""
        return await self.reader.get(task_id)

    async def wait(self, task_id: str, timeout: float | None = None) -> Outcome[Any]:
        """Wait for the task's outcome without polling and without holding a connection
        (:meth:`TaskReader.wait <dtq_core.reader.TaskReader.wait>`).

        Raises:
            TaskNotFoundError: no such task.
            TimeoutError: not finished within ``timeout`` seconds.
        """
        return await self.reader.wait(task_id, timeout)

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
        qk, rand = self.reader.locate(task_id)
        outcome, status = await self.scripts.cancel(
            qk,
            rand,
            events_maxlen=self.settings.queues.events_maxlen,
            retention_ms=self.settings.tasks.retention_s * 1000,
            channel=self.keys.cancel_channel,
        )
        if outcome == CancelOutcome.NOT_FOUND:
            raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
        if outcome == CancelOutcome.FINAL:
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
        qk, rand = self.reader.locate(task_id)
        (status,) = await self.scripts.requeue(
            qk,
            [rand],
            events_maxlen=self.settings.queues.events_maxlen,
            retention_ms=self.settings.tasks.retention_s * 1000,
        )
        if status == "":
            raise TaskNotFoundError(f"task {task_id} not found", task_id=task_id)
        if status != RequeueOutcome.REQUEUED:
            raise InvalidStateError(
                f"task {task_id} is {status}; only dead or failed tasks can be retried",
                task_id=task_id,
                status=status,
            )
        return TaskStatus.QUEUED

    def handle(self, task_id: str) -> TaskHandle[Any]:
        """A handle for a task id obtained elsewhere (REST, logs)."""
        qk, _ = self.reader.locate(task_id)
        return TaskHandle(self, task_id, qk.queue, TaskStatus.QUEUED, created=False)
