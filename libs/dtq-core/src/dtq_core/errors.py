"""The dtq exception tree. Every error carries a stable ``code``.

::

    DtqError
    ├── SettingsError            a DTQ_* variable is invalid (code: invalid_setting)
    ├── ValidationError          bad input; nothing was written (code: validation_error)
    │   ├── InvalidNameError     queue or task name outside the pattern (code: invalid_name)
    │   ├── PayloadTooLargeError args/kwargs/metadata over the limit (code: payload_too_large)
    │   ├── UnknownTaskError     no live worker of the queue handles this task (code: unknown_task)
    │   └── UnknownQueueError    no worker serves the queue and no admin created it
    │                            (code: unknown_queue)
    ├── QueueFullError           admission control refused the task (code: queue_full)
    ├── QueueLimitError          the queue registry holds DTQ_MAX_QUEUES queues (code: queue_limit)
    ├── QueueNotEmptyError       a queue that holds tasks cannot be deleted (code: queue_not_empty)
    ├── IdempotencyConflictError same key, different request (code: idempotency_conflict)
    ├── TaskNotFoundError        no such task (code: task_not_found)
    ├── QueueNotFoundError       no task was ever submitted to this queue (code: queue_not_found)
    ├── ScheduleNotFoundError    no schedule has this name (code: schedule_not_found)
    ├── InvalidStateError        the transition is not allowed from the task's state
    │                            (code: invalid_state)
    ├── StaleLeaseError          the caller's lease was superseded (code: stale_lease)
    ├── StaleLeaderError         a newer scheduler leadership exists (code: stale_leader)
    └── RedisUnavailableError    Redis did not answer (code: redis_unavailable)
        ├── RedisBusyError       every connection of the process's pool was busy (code: redis_busy)
        └── NotReplicatedError   written on the master, not confirmed by DTQ_REDIS_WAIT_REPLICAS
                                 replicas in time (code: redis_not_replicated)

Handlers control retries with two more classes that are not errors of dtq itself:
:class:`Retry` (retry after a given delay) and :class:`PermanentError` (never retry).
"""

from __future__ import annotations

from typing import Any, ClassVar


class DtqError(Exception):
    """Base class of every error dtq raises. ``code`` is stable and machine-readable."""

    code: ClassVar[str] = "dtq_error"

    def __init__(self, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class SettingsError(DtqError):
    """A ``DTQ_*`` setting (or an ``OTEL_*`` variable of the traces export) is invalid; the
    message names the variable, the value and the rule."""

    code = "invalid_setting"


class ValidationError(DtqError):
    """Input was refused before anything was written."""

    code = "validation_error"

    def __init__(self, message: str, *, field: str | None = None, **detail: Any) -> None:
        super().__init__(message, field=field, **detail)
        self.field = field


class InvalidNameError(ValidationError):
    """A queue or task name does not match :data:`dtq_core.protocol.keys.NAME_PATTERN`."""

    code = "invalid_name"


class PayloadTooLargeError(ValidationError):
    """The encoded args, kwargs and metadata exceed ``DTQ_MAX_PAYLOAD_BYTES``."""

    code = "payload_too_large"


class QueueFullError(DtqError):
    """The queue holds ``DTQ_MAX_QUEUE_DEPTH`` waiting tasks (delayed ones included)."""

    code = "queue_full"


class IdempotencyConflictError(DtqError):
    """The idempotency key was used before with a different request."""

    code = "idempotency_conflict"


class TaskNotFoundError(DtqError):
    """No task with this id exists (never existed, or its record expired)."""

    code = "task_not_found"


class QueueNotFoundError(DtqError):
    """No task was ever submitted to this queue, so it is not in the queue registry."""

    code = "queue_not_found"


class ScheduleNotFoundError(DtqError):
    """No schedule with this name exists."""

    code = "schedule_not_found"


class WorkflowNotFoundError(DtqError):
    """No workflow has this id (or its record expired)."""

    code = "workflow_not_found"


class WorkflowFailedError(DtqError):
    """The workflow failed or was cancelled: ``status`` says which; ``error`` is the error
    value of the step that failed it (``failed_step``), if one did."""

    code = "workflow_failed"


class InvalidStateError(DtqError):
    """The requested transition is not allowed from the task's current state."""

    code = "invalid_state"


class StaleLeaseError(DtqError):
    """The lease token no longer matches: another attempt owns the task now."""

    code = "stale_lease"


class StaleLeaderError(DtqError):
    """A scheduler with a newer leadership epoch has acted on this queue."""

    code = "stale_leader"


class UnknownTaskError(ValidationError):
    """No live worker of the task's queue has a handler for this task name (nothing was
    written). ``queues`` names the queues whose workers do handle it."""

    code = "unknown_task"


class UnknownQueueError(ValidationError):
    """The queue is not in the queue registry: no worker serves it and no admin created it
    (nothing was written)."""

    code = "unknown_queue"


class QueueLimitError(DtqError):
    """The queue registry already holds ``DTQ_MAX_QUEUES`` queues; nothing was written."""

    code = "queue_limit"


class QueueNotEmptyError(DtqError):
    """A queue that holds waiting, running, delayed or dead tasks cannot be deleted."""

    code = "queue_not_empty"


class BatchRefusedError(DtqError, ExceptionGroup[Exception]):
    """Some tasks of one ``enqueue_many`` were refused; the others were submitted (a
    :class:`DtqError`, and an ``ExceptionGroup`` of the refusals).

    ``results`` has one entry per request, in order: its handle, or the error that refused it;
    :attr:`accepted` are the handles, :attr:`refused` the ``(index, error)`` pairs. The group's
    exceptions are the refusals, so ``except* QueueFullError`` catches those of one kind.
    ``enqueue_many(..., return_exceptions=True)`` returns ``results`` instead of raising.
    """

    code: ClassVar[str] = "batch_refused"
    results: list[Any]

    def __new__(cls, results: list[Any]) -> BatchRefusedError:
        refused = [r for r in results if isinstance(r, Exception)]
        message = (
            f"{len(refused)} of {len(results)} tasks were refused and the others submitted "
            f"(the first refusal: {refused[0]}); the error's accepted and refused say which"
        )
        self = ExceptionGroup.__new__(cls, message, refused)
        self.results = results
        return self

    def __init__(self, results: list[Any]) -> None:
        # The group's message is read-only: DtqError's __init__, which sets it, is skipped.
        BaseExceptionGroup.__init__(self, self.message, list(self.exceptions))
        self.detail = {"refused": len(self.exceptions), "total": len(results)}

    @property
    def accepted(self) -> list[Any]:
        """The handles of the tasks submitted, in order."""
        return [r for r in self.results if not isinstance(r, Exception)]

    @property
    def refused(self) -> list[tuple[int, Exception]]:
        """``(index in the batch, error)`` of each refused task."""
        return [(i, r) for i, r in enumerate(self.results) if isinstance(r, Exception)]


class RedisUnavailableError(DtqError):
    """Redis did not answer (connection refused, timeout, loading, or out of memory)."""

    code = "redis_unavailable"


class RedisBusyError(RedisUnavailableError):
    """Every connection of this process's Redis pool stayed in use while the command waited
    for one (``DTQ_REDIS_MAX_CONNECTIONS``). Transient: callers retry."""

    code = "redis_busy"


class NotReplicatedError(RedisUnavailableError):
    """A state transition ran on the master but fewer than ``DTQ_REDIS_WAIT_REPLICAS``
    replicas confirmed it within ``DTQ_REDIS_WAIT_TIMEOUT_MS``. The write may survive or be
    lost in a failover; retrying is safe (an idempotency key for submits, the lease for a
    worker's transitions). Transient: callers retry."""

    code = "redis_not_replicated"


class LibraryMissingError(RedisUnavailableError):
    """Redis holds no dtq function library of this version and the caller may not load one
    (``dtq migrate`` loads it). Transient, like Redis being down: callers retry."""

    code = "redis_unavailable"


class Retry(Exception):  # noqa: N818 - raised by handlers to ask for a retry; reads as a verb
    """Raise from a handler to retry the task after ``delay_s`` seconds.

    The retry still counts against ``max_attempts``; when the budget is spent the task goes
    to the dead-letter queue like any other failure.

    Args:
        delay_s: seconds until the next attempt; ``None`` uses the exponential backoff.
        reason: recorded in the task's error history.
    """

    def __init__(self, delay_s: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay_s = delay_s
        self.reason = reason


class PermanentError(Exception):
    """Raise from a handler when retrying cannot help: the task goes to the DLQ at once."""
