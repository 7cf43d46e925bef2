"""The SDK for code without an event loop: :class:`SyncClient` runs a :class:`Client` on a
private event loop in a background thread, and every call blocks until it is done."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, Self, TypeVar, overload

from dtq_core.client import Client
from dtq_core.errors import BatchRefusedError
from dtq_core.handles import TaskHandle
from dtq_core.messages import (
    BatchRecord,
    Outcome,
    TaskRecord,
    TaskRequest,
    TaskStatus,
    WorkflowRecord,
    WorkflowStatus,
    WorkflowStep,
)
from dtq_core.protocol.workflows import Expr, Policy
from dtq_core.tasks import Task, TaskDef
from dtq_core.workflows import Batch, WorkflowHandle

T = TypeVar("T")


class SyncTaskHandle:
    """:class:`TaskHandle` for :class:`SyncClient`."""

    __slots__ = ("_handle", "_sync")

    def __init__(self, sync: SyncClient, handle: TaskHandle[Any]) -> None:
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
    def dedup(self) -> str | None:
        return self._handle.dedup

    @property
    def trace_id(self) -> str | None:
        return self._handle.trace_id

    def status(self) -> TaskStatus:
        return self._sync._run(self._handle.status())

    def info(self) -> TaskRecord:
        return self._sync._run(self._handle.info())

    def result(self, timeout: float | None = None) -> Outcome[Any]:
        return self._sync._run(self._handle.result(timeout))

    def cancel(self) -> TaskStatus:
        return self._sync._run(self._handle.cancel())


class SyncWorkflowHandle:
    """:class:`~dtq_core.workflows.WorkflowHandle` for :class:`SyncClient`."""

    __slots__ = ("_handle", "_sync")

    def __init__(self, sync: SyncClient, handle: WorkflowHandle) -> None:
        self._sync = sync
        self._handle = handle

    @property
    def id(self) -> str:
        return self._handle.id

    def status(self) -> WorkflowStatus:
        return self._sync._run(self._handle.status())

    def get(self) -> WorkflowRecord:
        return self._sync._run(self._handle.get())

    def steps(self) -> list[WorkflowStep]:
        return self._sync._run(self._handle.steps())

    def result(self, timeout: float | None = None) -> Any:
        return self._sync._run(self._handle.result(timeout))

    def cancel(self) -> WorkflowStatus:
        return self._sync._run(self._handle.cancel())


class SyncBatch:
    """:class:`~dtq_core.workflows.Batch` for :class:`SyncClient` (created already; ``with``
    seals it when the block ends, and cancels it if the block raises)."""

    __slots__ = ("_batch", "_sync")

    def __init__(self, sync: SyncClient, batch: Batch) -> None:
        self._sync = sync
        self._batch = batch

    @property
    def id(self) -> str:
        return self._batch.id

    def __enter__(self) -> SyncBatch:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._sync._run(self._batch.__aexit__(exc_type, exc, tb))

    def add(self, member: Expr) -> str | None:
        return self._sync._run(self._batch.add(member))

    def add_many(self, members: Iterable[Expr]) -> list[str | None]:
        return self._sync._run(self._batch.add_many(members))

    def seal(self) -> WorkflowStatus:
        return self._sync._run(self._batch.seal())

    def cancel(self) -> WorkflowStatus:
        return self._sync._run(self._batch.cancel())

    def counts(self) -> BatchRecord:
        return self._sync._run(self._batch.counts())

    def wait(self, timeout: float | None = None) -> BatchRecord:
        return self._sync._run(self._batch.wait(timeout))


class SyncClient:
    """The :class:`Client` surface for code without an event loop (thread-safe).

    It runs a private event loop in a background thread; every call blocks until done.
    """

    def __init__(self, url: str | None = None, **settings: Any) -> None:
        """Args:
        url: Redis, as :meth:`Client.from_url` takes it; ``None``: the client is configured
            from the environment (:meth:`Client.from_env`).
        settings: settings by flat name, winning over the defaults (or the environment).
        """
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dtq-sync", daemon=True)
        self._thread.start()
        self._client = self._run(self._make(url, settings))

    @classmethod
    def from_url(cls, url: str, **settings: Any) -> SyncClient:
        """:meth:`Client.from_url`: no ``DTQ_*`` variable is read."""
        return cls(url, **settings)

    @classmethod
    def from_env(cls, **settings: Any) -> SyncClient:
        """:meth:`Client.from_env`: the ``DTQ_*`` variables of the process, then ``settings``."""
        return cls(None, **settings)

    @staticmethod
    async def _make(url: str | None, settings: dict[str, Any]) -> Client:
        if url is None:
            return Client.from_env(**settings)
        return Client.from_url(url, **settings)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the client and stop its thread (closing twice is harmless)."""
        if self._loop.is_closed():
            return
        self._run(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @overload
    def submit(
        self, requests: TaskRequest, *, defaults: TaskDef | None = None
    ) -> SyncTaskHandle: ...
    @overload
    def submit(
        self,
        requests: Iterable[TaskRequest | Mapping[str, Any]],
        *,
        defaults: TaskDef | None = None,
    ) -> list[SyncTaskHandle | Exception]: ...
    def submit(
        self,
        requests: TaskRequest | Iterable[TaskRequest | Mapping[str, Any]],
        *,
        defaults: TaskDef | None = None,
    ) -> SyncTaskHandle | list[SyncTaskHandle | Exception]:
        """See :meth:`Client.submit`."""
        if isinstance(requests, TaskRequest):
            return SyncTaskHandle(self, self._run(self._client.submit(requests, defaults=defaults)))
        results = self._run(self._client.submit(list(requests), defaults=defaults))
        return [SyncTaskHandle(self, r) if isinstance(r, TaskHandle) else r for r in results]

    def enqueue(
        self,
        task: str | TaskDef | Task[Any, Any],
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> SyncTaskHandle:
        """See :meth:`Client.enqueue`."""
        return SyncTaskHandle(self, self._run(self._client.enqueue(task, args, kwargs, **options)))

    def enqueue_many(
        self,
        requests: Iterable[TaskRequest | Mapping[str, Any]],
        *,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """See :meth:`Client.enqueue_many` (``BatchRefusedError.results`` holds
        :class:`SyncTaskHandle` objects here)."""
        results = self.submit(list(requests))
        if not return_exceptions and any(isinstance(r, Exception) for r in results):
            raise BatchRefusedError(results)
        return results

    def enqueue_workflow(
        self, workflow: Expr, *, name: str | None = None, on_failure: Policy = "fail"
    ) -> SyncWorkflowHandle:
        """See :meth:`Client.enqueue_workflow`."""
        handle = self._run(
            self._client.enqueue_workflow(workflow, name=name, on_failure=on_failure)
        )
        return SyncWorkflowHandle(self, handle)

    def workflow(self, workflow_id: str) -> SyncWorkflowHandle:
        """See :meth:`Client.workflow`."""
        return SyncWorkflowHandle(self, self._client.workflow(workflow_id))

    def batch(
        self,
        *,
        on_success: Expr | None = None,
        on_complete: Expr | None = None,
        name: str | None = None,
    ) -> SyncBatch:
        """See :meth:`Client.batch`: the batch is created at once."""
        batch = self._client.batch(on_success=on_success, on_complete=on_complete, name=name)
        return SyncBatch(self, self._run(batch.open()))

    def batch_of(self, batch_id: str) -> SyncBatch:
        """See :meth:`Client.batch_of`."""
        return SyncBatch(self, self._client.batch_of(batch_id))

    def get(self, task_id: str) -> TaskRecord | None:
        """See :meth:`Client.get`."""
        return self._run(self._client.get(task_id))

    def wait(self, task_id: str, timeout: float | None = None) -> Outcome[Any]:
        """See :meth:`Client.wait`."""
        return self._run(self._client.wait(task_id, timeout))

    def cancel(self, task_id: str) -> TaskStatus:
        """See :meth:`Client.cancel`."""
        return self._run(self._client.cancel(task_id))

    def retry(self, task_id: str) -> TaskStatus:
        """See :meth:`Client.retry`."""
        return self._run(self._client.retry(task_id))
