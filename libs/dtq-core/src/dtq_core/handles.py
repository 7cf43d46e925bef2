"""Handles of submitted tasks (what a submit returns) and how a task's outcome is read off its
record."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar, cast

from dtq_core.errors import TaskNotFoundError
from dtq_core.messages import Outcome, TaskRecord, TaskStatus


class TaskLookup(Protocol):
    """What a handle asks of its client (:class:`dtq_core.Client` is one)."""

    async def get(self, task_id: str) -> TaskRecord | None: ...
    async def wait(self, task_id: str, timeout: float | None = None) -> Outcome[Any]: ...
    async def cancel(self, task_id: str) -> TaskStatus: ...


R = TypeVar("R")


class TaskHandle(Generic[R]):
    """A submitted task. Obtained from :meth:`Client.submit` or :meth:`Client.enqueue`, or,
    typed ``TaskHandle[R]`` for a handler that returns ``R``, from a typed task's
    :meth:`~dtq_core.tasks.Task.enqueue`.

    Attributes:
        id: the task id (``<queue>:<32 hex digits>``).
        queue: the queue it went to.
        submitted_status: its status when the submit answered (``queued``, ``scheduled``,
            or the original task's current status on an idempotent replay).
        created: false on an idempotent replay or a deduplicated submit (``id`` is then the
            original task's).
        dedup: with a dedup mode, ``original`` or ``replaced`` when no task was made (see
            :attr:`dtq_core.messages.SubmitResult.dedup`); ``None`` otherwise.
        trace_id: the trace the submit's span belongs to (``None`` when it was not traced).
    """

    __slots__ = ("_client", "created", "dedup", "id", "queue", "submitted_status", "trace_id")

    def __init__(
        self,
        client: TaskLookup,
        task_id: str,
        queue: str,
        status: TaskStatus,
        created: bool,
        *,
        trace_id: str | None = None,
        dedup: str | None = None,
    ) -> None:
        self._client = client
        self.dedup = dedup
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
        """The whole task record.

        Raises:
            TaskNotFoundError: the record expired.
        """
        record = await self._client.get(self.id)
        if record is None:
            raise TaskNotFoundError(f"task {self.id} not found", task_id=self.id)
        return record

    async def result(self, timeout: float | None = None) -> Outcome[R]:
        """Wait until the task ends and return how it ended (``.result``: the handler's
        return value, once it succeeded).

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        return cast(Outcome[R], await self._client.wait(self.id, timeout=timeout))

    async def cancel(self) -> TaskStatus:
        """Cancel the task (see :meth:`Client.cancel`)."""
        return await self._client.cancel(self.id)


def outcome_of(record: TaskRecord) -> Outcome[Any]:
    """How the task of a terminal ``record`` ended: its last error unless it succeeded."""
    return Outcome(
        id=record.id,
        status=record.status,
        attempts=record.attempts,
        result=record.result,
        result_truncated=record.result_truncated,
        error=record.errors[-1] if record.errors and record.status != "succeeded" else None,
    )
