"""Wire types: what the SDK, the services and REST clients exchange, as msgspec Structs.

Schema evolution rules (tested in ``tests/test_messages.py`` with encoded samples of older
versions): new fields get defaults, a field never changes type, no ``array_like`` and no
``forbid_unknown_fields`` on types that are stored or sent between services.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import msgspec

from dtq_core.names import logical_queue, make_task_id


class TaskStatus(enum.StrEnum):
    """The lifecycle: ``scheduled`` → ``queued`` → ``running`` → ``succeeded`` |
    ``retrying`` → … | ``dead`` (DLQ) | ``failed`` (DLQ disabled) | ``cancelled`` | ``expired``.
    """

    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"

    @property
    def terminal(self) -> bool:
        """Whether the task will not change state again (unless requeued by an operator)."""
        return self in TERMINAL


TERMINAL = frozenset(
    {
        TaskStatus.SUCCEEDED,
        TaskStatus.DEAD,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
        TaskStatus.EXPIRED,
    }
)
TERMINAL_EVENTS = frozenset(f"task.{s.value}" for s in TERMINAL)

EVENT_TYPES = (
    "task.queued",
    "task.scheduled",
    "task.started",
    "task.progress",
    "task.succeeded",
    "task.retrying",
    "task.dead",
    "task.failed",
    "task.cancelled",
    "task.expired",
    "task.requeued",
    "task.discarded",
    "task.deduplicated",
    "queue.paused",
    "queue.resumed",
    "worker.stale",
    "workflow.started",
    "workflow.succeeded",
    "workflow.failed",
    "workflow.cancelled",
)
"""Every lifecycle event type the scripts and services write (docs/events.md's table, in its
order); the event gateway refuses a ``types`` filter naming anything else. A unit test checks
that every type written anywhere is listed."""


class EventField(enum.StrEnum):
    """The fields of an event-stream entry (docs/events.md): one entry per transition call and
    event type. The Lua ``emit`` helper (``lua/_lib.lua``) and :mod:`dtq_core.protocol.events`
    write them, :func:`expand_events` reads them; the values are the wire names."""

    TYPE = "type"
    IDS = "ids"  # the batch's task rands, comma-separated
    TASKS = "tasks"  # their task names, in the same order
    ATTEMPTS = "att"  # their attempt numbers, in the same order
    WORKER = "w"  # task.started: the worker that started the attempts
    REASON = "reason"  # why a task was requeued, queued again, cancelled or discarded
    PROGRESS = "progress"  # task.progress: the report, JSON
    ACTOR = "actor"  # queue.paused and queue.resumed: who did it
    STALE_WORKER = "worker"  # worker.stale (global): the worker removed; spelled out there
    TRACES = "tr"  # the tasks' trace ids, in the same order ("" untraced); absent: none traced


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TaskError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One failed attempt in a task's error history, as the SDK and the API return it."""

    attempt: int
    type: str
    message: str
    reason: str = "exception"
    """``exception``, ``timeout``, ``lease_expired``, ``retry_requested``, ``permanent`` or
    ``unknown_task``."""
    traceback: str | None = None
    worker: str | None = None
    ts: datetime | None = None
    """When the attempt failed (UTC; RFC 3339 over REST, like every other time the API gives)."""


class StoredError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One entry of a task hash's error history (``err``, a JSON array) as workers and the
    scripts write it: :class:`TaskError` with ``ts`` in microseconds since the epoch as a
    string, which a Lua script can build exactly from ``TIME``. Readers turn it into a
    :class:`TaskError` with :meth:`view`, so one time format reaches users."""

    attempt: int
    type: str
    message: str
    reason: str = "exception"
    traceback: str | None = None
    worker: str | None = None
    ts: str | None = None

    def view(self) -> TaskError:
        return TaskError(
            attempt=self.attempt,
            type=self.type,
            message=self.message,
            reason=self.reason,
            traceback=self.traceback,
            worker=self.worker,
            ts=micros_to_datetime(self.ts),
        )


class Progress(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The latest progress report of a running task."""

    value: float
    message: str | None = None


class TaskRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One task to submit; the fields and meanings of ``POST /api/v1/tasks``."""

    task: str
    args: list[Any] = msgspec.field(default_factory=list)
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    queue: str | None = None
    """``None``: the queue the task is registered on (``default`` for a name no worker has)."""
    priority: int = 5
    delay_s: float | None = None
    eta: datetime | None = None
    max_attempts: int | None = None
    timeout_s: float | None = None
    ttl_s: float | None = None
    idempotency_key: str | None = None
    metadata: dict[str, Any] | None = None
    dedup: str | None = None
    """``until_finished``, ``debounce`` or ``throttle``, with ``dedup_key``
    (docs/flow-control.md, "Deduplication")."""
    dedup_key: str | None = None
    debounce_s: float | None = None
    """``debounce``: the task runs this long after the last submit of its key."""
    throttle_s: float | None = None
    """``throttle``: at most one task of the key per window of this length."""
    group: str | None = None
    """The task's group: groups of a queue take turns, and group limits apply to each
    (docs/flow-control.md, "Groups")."""


class _TaskFields(msgspec.Struct, frozen=True, kw_only=True):
    """What a task record and a task summary share: everything but the bodies."""

    id: str
    task: str
    queue: str
    status: TaskStatus
    priority: int
    attempts: int
    max_attempts: int | None
    """``None`` until the first claim when the submit left it to the task's default."""
    timeout_s: float | None
    created_at: datetime
    scheduled_for: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    progress: Progress | None = None
    worker: str | None = None
    cancel_requested: bool = False
    expires_at: datetime | None = None
    result_truncated: bool = False
    group: str | None = None
    workflow_id: str | None = None
    """The workflow the task is a step of (docs/workflows.md), or ``None``."""
    workflow_step: int | None = None
    """Its step's index in that workflow."""
    children_workflow_id: str | None = None
    """The workflow of the children the task spawned (docs/workflows.md, "Child tasks"), or
    ``None``."""


class TaskType(msgspec.Struct, frozen=True, kw_only=True):
    """A task the live workers run (``GET /api/v1/task-types``)."""

    name: str
    queue: str
    """The queue its definition names (where a submit that names none goes)."""
    queues: list[str]
    """The queues whose live workers have a handler for it."""
    args_schema: dict[str, Any] | None = None
    """The JSON Schema of its handler's arguments, from its annotations: properties by name,
    ``x-positional`` the names positional arguments bind to (``None``: its workers published
    none). Submits are checked against it."""


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """Why a waiting task has not started, and when it can, where known
    (docs/flow-control.md, "Why a task waits")."""

    reason: str
    """``scheduled`` (due at ``until``), ``queue_paused``, ``rate_limited`` (the next start
    of its queue at ``until``), ``queue_concurrency_full`` (``detail``: ``3/3 running``), or
    ``group_paused``, ``group_concurrency_full`` (``detail``: ``group customer:42: 2/2
    running``), ``group_rate_limited`` (the group's next start at ``until``), ``group_turn``
    (its group's earlier tasks go first; ``detail``: how many), or ``ready`` (it may start:
    the next worker with room takes it)."""
    until: datetime | None = None
    detail: str | None = None


class TaskRecord(_TaskFields, frozen=True, kw_only=True):
    """A task as the SDK and the API return it."""

    args: list[Any] = msgspec.field(default_factory=list)
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    result: Any = None
    errors: list[TaskError] = msgspec.field(default_factory=list)
    waiting: Waiting | None = None
    """For a task that has not started (queued, scheduled, retrying): why; else ``None``."""
    trace_id: str | None = None
    """The trace the task's submit and attempts belong to (32 hex digits), when its submit was
    traced (docs/tracing.md); else ``None``."""
    trace_url: str | None = None
    """That trace in the trace viewer ``DTQ_TRACE_URL`` names, when it is set; else ``None``."""


class TaskSummary(_TaskFields, frozen=True, kw_only=True):
    """A task as list pages return it: the record without its bodies. Arguments, metadata,
    the result and the error history can each be up to ``DTQ_MAX_PAYLOAD_BYTES``; a page of
    500 full records was tens of MB, so lists give their sizes and ``GET /tasks/{id}`` the
    bodies."""

    args_bytes: int = 0
    """Size of the stored JSON of ``args`` (likewise ``kwargs``, ``metadata``, ``result``)."""
    kwargs_bytes: int = 0
    metadata_bytes: int = 0
    result_bytes: int = 0
    errors_bytes: int = 0
    """Size of the stored error history (every failed attempt, tracebacks included)."""
    error_count: int | None = 0
    """Failed attempts; ``None`` when the history is too large to be read for a list."""
    last_error: TaskError | None = None
    """The latest failed attempt, without its traceback, its message cut to 200 characters."""


class SubmitResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to one submitted task.

    ``created`` is false on an idempotent replay: ``id`` is then the original task's.
    """

    id: str
    queue: str
    status: TaskStatus
    created: bool = True
    dedup: str | None = None
    """With a ``dedup`` mode: ``original`` (a task of the key held it: that task is returned)
    or ``replaced`` (``debounce``: the waiting task took this submit's arguments and due
    time); ``None`` for a new task."""


R = TypeVar("R")


class Outcome(msgspec.Struct, Generic[R], frozen=True, kw_only=True):
    """How a task ended, as :meth:`TaskHandle.result` reports it: ``Outcome[R]`` for a task
    whose handler returns ``R`` (a typed task, README.md, "Using it from Python")."""

    id: str
    status: TaskStatus
    attempts: int
    result: R | None = None
    """The handler's return value once it succeeded (``None`` otherwise)."""
    result_truncated: bool = False
    error: TaskError | None = None

    @property
    def ok(self) -> bool:
        return self.status is TaskStatus.SUCCEEDED


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """One lifecycle event, as the event gateway sends it.

    ``cursor`` here is ``<stream entry id>/<index>`` (one entry holds a whole batch); the
    event gateway replaces it with an opaque cursor over every stream a client follows.
    """

    type: str
    cursor: str
    ts: float
    queue: str | None = None
    task_id: str | None = None
    task: str | None = None
    attempt: int | None = None
    worker: str | None = None
    reason: str | None = None
    data: dict[str, Any] | None = None
    trace_id: str | None = None
    """The task's trace, on the events of a traced task's submit, start and finish."""


def micros_to_datetime(value: str | bytes | None) -> datetime | None:
    if value is None or value == "":
        return None
    # Exact to the microsecond (a float of 1.7e15 microseconds is not).
    return EPOCH + timedelta(microseconds=int(value))


def stream_id_seconds(entry_id: str) -> float:
    """The server time (seconds) encoded in a stream entry id ``<ms>-<seq>``."""
    return int(entry_id.partition("-")[0]) / 1000


def expand_events(stored: str | None, entry_id: str, fields: dict[str, str]) -> list[Event]:
    """Turn one event-stream entry (a whole batch) into one :class:`Event` per task.

    ``stored`` is the stream's queue (a partition's name for a partitioned queue: the task ids
    carry it, the events name the queue)."""
    queue = logical_queue(stored) if stored else None
    etype = fields.get(EventField.TYPE, "unknown")
    ts = stream_id_seconds(entry_id)
    ids = fields[EventField.IDS].split(",") if fields.get(EventField.IDS) else []
    names = fields[EventField.TASKS].split(",") if fields.get(EventField.TASKS) else []
    attempts = fields[EventField.ATTEMPTS].split(",") if fields.get(EventField.ATTEMPTS) else []
    traces = fields[EventField.TRACES].split(",") if fields.get(EventField.TRACES) else []
    worker = fields.get(EventField.WORKER)
    reason = fields.get(EventField.REASON)
    data: dict[str, Any] | None = None
    if EventField.PROGRESS in fields:
        data = {"progress": msgspec.json.decode(fields[EventField.PROGRESS])}
    if not ids:
        extra = {k: v for k, v in fields.items() if k not in {EventField.TYPE}}
        return [
            Event(
                type=etype,
                cursor=f"{entry_id}/0",
                ts=ts,
                queue=queue,
                worker=worker or fields.get(EventField.STALE_WORKER),
                reason=reason,
                data=extra or None,
            )
        ]
    return [
        Event(
            type=etype,
            cursor=f"{entry_id}/{i}",
            ts=ts,
            queue=queue,
            task_id=make_task_id(stored, rand) if stored else rand,
            task=names[i] if i < len(names) else None,
            attempt=int(attempts[i]) if i < len(attempts) else None,
            worker=worker,
            reason=reason,
            data=data,
            trace_id=(traces[i] or None) if i < len(traces) else None,
        )
        for i, rand in enumerate(ids)
    ]


class WorkflowStatus(enum.StrEnum):
    """Where a workflow stands (docs/workflows.md)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self is not WorkflowStatus.RUNNING


class WorkflowStep(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a workflow, as ``GET /api/v1/workflows/{id}`` shows it."""

    step: int
    """Its index in the workflow (the order of the definition, depth first)."""
    task: str
    queue: str
    status: str
    """``pending`` (not submitted: it waits for its inputs), ``cancelled`` before it was
    submitted, else its task's status (``queued``, ``running``, ``succeeded``, ...)."""
    depends_on: list[int]
    """The steps whose results it waits for (and receives, unless ``pass_result`` is off)."""
    task_id: str | None = None
    """Its task, once submitted."""
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result: Any = None
    """The value its successors get: its result, or (``on_failure="continue"``) its error
    value ``{"dtq_error": {...}}``, or null (``"ignore"``)."""


class WorkflowRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow and its steps (``GET /api/v1/workflows/{id}``)."""

    id: str
    name: str | None
    status: WorkflowStatus
    on_failure: str
    created_at: datetime
    finished_at: datetime | None
    steps_total: int
    steps_ended: int
    result: Any = None
    """Once it succeeded: the workflow's result (a chain's last step's, a group's list, a
    chord's callback's)."""
    error: Any = None
    """Once it failed: the error value of the first step that failed it."""
    failed_step: int | None = None
    kind: str = "workflow"
    """``workflow``, or ``batch`` (docs/workflows.md, "Batches")."""
    parent_task_id: str | None = None
    """The task whose children its steps are (docs/workflows.md, "Child tasks"), or
    ``None``."""
    steps: list[WorkflowStep] = msgspec.field(default_factory=list)


class BatchRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A batch and its members' counts (``GET /api/v1/batches/{id}``; its steps are those of
    ``GET /api/v1/workflows/{id}``)."""

    id: str
    name: str | None
    status: WorkflowStatus
    """``running`` until it is sealed and everything in it ended; then ``succeeded`` (every
    member and callback succeeded), ``failed`` or ``cancelled``."""
    sealed: bool
    total: int
    """Members added."""
    pending: int
    """Members not ended."""
    succeeded: int
    failed: int
    """Members that ended otherwise (failed, dead, cancelled, expired)."""
    created_at: datetime
    finished_at: datetime | None
    on_success: str | None
    """Its ``on_success`` callback's state: ``pending`` (waiting), ``queued``, how its task
    ended, or ``cancelled`` (skipped: a member failed); ``None``: it has none."""
    on_complete: str | None
    """Its ``on_complete`` callback's state, the same way."""


class WorkflowSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow in a list (``GET /api/v1/workflows``): its record without the steps."""

    id: str
    name: str | None
    status: WorkflowStatus
    created_at: datetime
    finished_at: datetime | None
    steps_total: int
    steps_ended: int
    kind: str = "workflow"
    """``workflow``, or ``batch``."""
