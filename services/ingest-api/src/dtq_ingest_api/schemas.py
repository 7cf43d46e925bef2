"""REST-only request and response shapes (msgspec Structs).

Request bodies refuse unknown fields (a mass-assignment probe such as ``"status"`` in a submit
is a 422, not silently dropped) and bound every number and string, so the OpenAPI document
states the rules and the decoder enforces them before anything reaches dtq-core. Wire types
that are stored or exchanged between services (``TaskRecord``, ``Outcome``, ...) live in
``dtq_core.messages`` and are returned as they are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from dtq_core import messages
from dtq_core.messages import TaskRequest, TaskStatus, WorkflowStatus
from dtq_core.names import ANCHORED_NAME_PATTERN, MAX_PARTITIONS
from dtq_core.ops.admin import MAX_WEIGHT, QueueStats, WorkerInfo
from dtq_core.ops.admin.config import MAX_BURST, MAX_CONCURRENCY, MAX_DEPTH_CAP, RATE_PATTERN
from dtq_core.ops.schedules import (
    DEFAULT_MISFIRE_CAP,
    MAX_EVERY_S,
    MAX_JITTER_S,
    MAX_MISFIRE_CAP,
    MIN_EVERY_S,
    Misfire,
    ScheduleInfo,
    ScheduleSpec,
)
from dtq_core.protocol.submit import (
    GROUP_MAX,
    IDEMPOTENCY_KEY_MAX,
    MAX_ATTEMPTS_CAP,
    MAX_TIMEOUT_S,
)

BATCH_MAX = 1000
"""Tasks per ``POST /tasks/batch``."""

MAX_DELAY_S = 10 * 365 * 86400.0
"""Upper bound in the schema; the real bound is ``DTQ_TASK_RETENTION_S`` (checked by dtq-core)."""

WAIT_MAX_S = 60.0
"""Longest long-poll of ``GET /tasks/{id}/result``."""

NAME_RE = ANCHORED_NAME_PATTERN
"""Queue, task and schedule names (the pattern of dtq_core.protocol.keys), anchored."""

Name = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=64,
        pattern=NAME_RE,
        description="Letters, digits, '_', '.', '-'; starts with a letter or digit; 1-64.",
    ),
]
TaskIdText = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=100,
        description="A task id as the API returned it: `<queue>:<32 hex digits>`.",
    ),
]
Cursor = Annotated[
    str, Meta(min_length=1, max_length=200, description="`next_cursor` of the previous page.")
]
JsonObject = dict[str, Any]


class SubmitRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One task to submit (``POST /api/v1/tasks``)."""

    task: Name
    queue: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=64,
                pattern=NAME_RE,
                description="The queue; left out: the queue the task is registered on (by the "
                "live workers that run it), `default` for a task no worker has registered.",
            ),
        ]
        | None
    ) = None
    args: Annotated[list[Any], Meta(description="Positional arguments (JSON).")] = msgspec.field(
        default_factory=list
    )
    kwargs: Annotated[JsonObject, Meta(description="Keyword arguments (JSON).")] = msgspec.field(
        default_factory=dict
    )
    priority: Annotated[int, Meta(ge=0, le=9, description="0-9; 9 runs first.")] = 5
    delay_s: (
        Annotated[
            float,
            Meta(ge=0, le=MAX_DELAY_S, description="Run no earlier than this many seconds."),
        ]
        | None
    ) = None
    eta: (
        Annotated[
            datetime,
            Meta(tz=True, description="Run no earlier than this time (RFC 3339, with a zone)."),
        ]
        | None
    ) = None
    max_attempts: (
        Annotated[int, Meta(ge=1, le=MAX_ATTEMPTS_CAP, description="Attempt budget.")] | None
    ) = None
    timeout_s: (
        Annotated[float, Meta(gt=0, le=MAX_TIMEOUT_S, description="Handler timeout.")] | None
    ) = None
    ttl_s: (
        Annotated[
            float,
            Meta(gt=0, le=MAX_DELAY_S, description="Expire the task if not started by then."),
        ]
        | None
    ) = None
    idempotency_key: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=IDEMPOTENCY_KEY_MAX,
                description="The same key with the same request returns the original task.",
            ),
        ]
        | None
    ) = None
    metadata: JsonObject | None = None
    dedup: (
        Annotated[
            Literal["until_finished", "debounce", "throttle"],
            Meta(
                description="With dedup_key: `until_finished` returns the key's unfinished "
                "task instead of a new one; `debounce` (with debounce_s) gives the key's waiting "
                "task these arguments and runs it debounce_s after the last submit; `throttle` "
                "(with throttle_s) makes at most one task of the key per window. The answer's "
                "`dedup` says `original` or `replaced` when no task was made."
            ),
        ]
        | None
    ) = None
    dedup_key: Annotated[str, Meta(min_length=1, max_length=IDEMPOTENCY_KEY_MAX)] | None = None
    debounce_s: Annotated[float, Meta(gt=0, le=MAX_DELAY_S)] | None = None
    throttle_s: Annotated[float, Meta(gt=0, le=MAX_DELAY_S)] | None = None
    group: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=GROUP_MAX,
                description="The task's group (`customer:42`): the groups of a queue take "
                "turns, and the queue's group_concurrency and group_rate apply to each.",
            ),
        ]
        | None
    ) = None

    def to_core(self, idempotency_key: str | None = None) -> TaskRequest:
        return TaskRequest(
            task=self.task,
            args=self.args,
            kwargs=self.kwargs,
            queue=self.queue,
            priority=self.priority,
            delay_s=self.delay_s,
            eta=self.eta,
            max_attempts=self.max_attempts,
            timeout_s=self.timeout_s,
            ttl_s=self.ttl_s,
            idempotency_key=idempotency_key or self.idempotency_key,
            metadata=self.metadata,
            dedup=self.dedup,
            dedup_key=self.dedup_key,
            debounce_s=self.debounce_s,
            throttle_s=self.throttle_s,
            group=self.group,
        )


class BatchEnvelope(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body of ``POST /api/v1/tasks/batch``: up to 1000 :class:`SubmitRequest` items, each
    decoded and checked on its own afterwards (``openapi_config.BatchOperation`` documents it)."""

    tasks: Annotated[list[msgspec.Raw], Meta(min_length=1, max_length=BATCH_MAX)]


class Submitted(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A submitted task. ``created`` is false on an idempotent replay or a deduplicated submit
    (the original task)."""

    id: str
    status: TaskStatus
    queue: str
    created: bool
    dedup: Literal["original", "replaced"] | None = None
    """With a dedup mode and no new task: ``original`` (the key's task, unchanged) or
    ``replaced`` (debounce: the key's waiting task took this submit's arguments)."""


class FieldError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One refused field: a JSON pointer into the request, and what is wrong."""

    message: str
    pointer: str | None = None
    field: str | None = None
    source: str | None = None
    """``body``, ``query``, ``path`` or ``header``."""
    code: str | None = None


class Problem(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An error (RFC 9457 problem details), as ``application/problem+json``."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    """Stable and machine-readable; the table is in docs/api.md."""
    request_id: str
    errors: list[FieldError] | None = None
    limit: int | None = None
    retry_after_s: int | None = None
    task_id: str | None = None
    queue: str | None = None
    queues: list[str] | None = None
    """``unknown_task``: the queues whose live workers do handle the task."""


class BatchItem(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The result of one batch item: ``task`` when accepted, else ``error``."""

    index: int
    status: int
    """The status this item would have had alone: 201, 200 (replay), 409, 413, 422, 429."""
    task: Submitted | None = None
    error: Problem | None = None


class BatchResponse(msgspec.Struct, frozen=True, kw_only=True):
    """One result per item, in request order."""

    results: list[BatchItem]
    created: int
    replayed: int
    refused: int


class Pending(msgspec.Struct, frozen=True, kw_only=True):
    """A task that had not finished when the long-poll ended (202)."""

    id: str
    status: TaskStatus
    attempts: int
    progress: float | None = None


class TaskState(msgspec.Struct, frozen=True, kw_only=True):
    """A task's status after a cancel (``cancelled``, or ``running`` while its handler stops)
    or a retry (``queued``)."""

    id: str
    status: TaskStatus


class GroupChange(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body of ``PUT /api/v1/queues/{q}/groups/{group}``: what to change (at least one)."""

    paused: (
        Annotated[bool, Meta(description="true: pause the group; false: resume it.")] | UnsetType
    ) = UNSET
    weight: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_WEIGHT,
                description="Turns the group gets for another's one (default 1).",
            ),
        ]
        | UnsetType
    ) = UNSET


class QueueState(msgspec.Struct, frozen=True, kw_only=True):
    queue: str
    paused: bool


class QueueCreate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body of ``POST /api/v1/queues``: the queue to create."""

    name: Name


class QueueConfigure(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body of ``PUT /api/v1/queues/{q}``: the settings to change. A field left out stays
    as it is; ``null`` clears a limit (docs/flow-control.md)."""

    partitions: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_PARTITIONS,
                description="Partitions the queue is split into (it may only grow): each lives "
                "in a Redis Cluster slot of its own, so one queue spreads over several masters.",
            ),
        ]
        | UnsetType
    ) = UNSET
    max_depth: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=MAX_DEPTH_CAP,
                description="Waiting tasks (delayed ones included) the queue admits; 0: no "
                "limit; null: each producer's DTQ_MAX_QUEUE_DEPTH.",
            ),
        ]
        | UnsetType
        | None
    ) = UNSET
    rate: (
        Annotated[
            str,
            Meta(
                pattern=RATE_PATTERN,
                description="Tasks started per period across every worker: `100/s`, `6000/m`, "
                "`10/h`, `500/d`; null: no limit.",
            ),
        ]
        | UnsetType
        | None
    ) = UNSET
    burst: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_BURST,
                description="Starts the rate lets through at once after a quiet time; null: "
                "a tenth of a second's worth.",
            ),
        ]
        | UnsetType
        | None
    ) = UNSET
    concurrency: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_CONCURRENCY,
                description="Tasks of the queue running at once across every worker; null: "
                "no limit.",
            ),
        ]
        | UnsetType
        | None
    ) = UNSET
    group_concurrency: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_CONCURRENCY,
                description="Tasks of one group running at once across every worker; null: "
                "no limit.",
            ),
        ]
        | UnsetType
        | None
    ) = UNSET
    group_rate: (
        Annotated[
            str,
            Meta(
                pattern=RATE_PATTERN,
                description="Tasks of one group started per period (`10/s`); null: no limit.",
            ),
        ]
        | UnsetType
        | None
    ) = UNSET


class QueueCreated(msgspec.Struct, frozen=True, kw_only=True):
    queue: str
    created: bool
    """False when the queue existed already (nothing changed)."""


class QueueDeleted(msgspec.Struct, frozen=True, kw_only=True):
    queue: str
    deleted: bool


class Count(msgspec.Struct, frozen=True, kw_only=True):
    """How many tasks an operation touched."""

    queue: str
    count: int


class RequeueRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which dead tasks to run again: exactly one of ``ids``, ``all`` or ``task``."""

    ids: Annotated[list[TaskIdText], Meta(min_length=1, max_length=BATCH_MAX)] | None = None
    all: bool = False
    task: Name | None = None


class ScheduleRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A schedule (``PUT /api/v1/schedules/{name}``): exactly one of ``cron`` and ``every_s``.

    ``name`` may be left out; when given it must equal the name in the path.
    """

    task: Name
    queue: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=64,
                pattern=NAME_RE,
                description="The queue; left out: the queue the task is registered on.",
            ),
        ]
        | None
    ) = None
    name: Name | None = None
    cron: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=200,
                description="Five cron fields (`*/5 * * * *`) or an alias (`@hourly`), read "
                "in `timezone`.",
            ),
        ]
        | None
    ) = None
    every_s: Annotated[float, Meta(ge=MIN_EVERY_S, le=MAX_EVERY_S)] | None = None
    args: list[Any] = msgspec.field(default_factory=list)
    kwargs: JsonObject = msgspec.field(default_factory=dict)
    priority: Annotated[int, Meta(ge=0, le=9)] = 5
    paused: bool = False
    timezone: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=64,
            description="The IANA time zone the cron fields are read in (`Europe/Paris`), "
            "DST-correct: a local time that happens twice fires once (its first occurrence), "
            "one that never happens fires once at the first instant after the gap. Interval "
            "schedules take only `UTC`.",
        ),
    ] = "UTC"
    misfire: Annotated[
        Misfire,
        Meta(
            description="Which ticks missed while no scheduler led fire: `latest` (the last "
            "one), `skip` (none; it goes on from the next) or `all` (each, oldest first, at "
            "most `misfire_cap`)."
        ),
    ] = "latest"
    misfire_cap: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_MISFIRE_CAP,
            description="With `misfire: all`, the most missed ticks fired (the latest).",
        ),
    ] = DEFAULT_MISFIRE_CAP
    jitter_s: Annotated[
        float,
        Meta(
            ge=0,
            le=MAX_JITTER_S,
            description="Each tick's task is submitted with a delay in [0, jitter_s), fixed "
            "per tick (a hash of the tick); less than the schedule's period.",
        ),
    ] = 0.0
    allow_unknown_task: Annotated[
        bool,
        Meta(
            description="Store the schedule although no live worker of its queue handles the "
            "task (or the queue does not exist yet); its ticks are refused until one does, and "
            "`last_tick` says so. Not stored."
        ),
    ] = False

    def to_spec(self, name: str, queue: str) -> ScheduleSpec:
        return ScheduleSpec(
            name=name,
            task=self.task,
            queue=queue,
            cron=self.cron,
            every_s=self.every_s,
            args=self.args,
            kwargs=self.kwargs,
            priority=self.priority,
            paused=self.paused,
            timezone=self.timezone,
            misfire=self.misfire,
            misfire_cap=self.misfire_cap,
            jitter_s=self.jitter_s,
        )


class Deleted(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    deleted: bool


class QueueList(msgspec.Struct, frozen=True, kw_only=True):
    items: list[QueueStats]


class WorkerList(msgspec.Struct, frozen=True, kw_only=True):
    items: list[WorkerInfo]


class ScheduleList(msgspec.Struct, frozen=True, kw_only=True):
    items: list[ScheduleInfo]


class Health(msgspec.Struct, frozen=True, kw_only=True):
    status: str


class Readiness(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``ready`` when Redis answers and will not evict dtq's keys."""

    status: str
    redis: str
    """``ok`` or ``unavailable``."""
    maxmemory_policy: str
    """The policy Redis reports, or ``unknown`` when CONFIG is not allowed for our user."""
    reasons: list[str] = msgspec.field(default_factory=list)
    """Why it is not ready (empty when it is)."""
    notes: list[str] = msgspec.field(default_factory=list)
    """What could not be checked."""
    appendonly: str | None = None
    """Whether Redis keeps an AOF (``yes``/``no``): without one a restart loses every task."""
    appendfsync: str | None = None
    """How often the AOF is flushed to disk: ``always`` (no acknowledged task lost to a crash),
    ``everysec`` (up to about two seconds of acknowledged submits lost to a crash under slow
    disks; docs/operations.md, "Durability"), ``no`` (the kernel decides)."""


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    """Who the presented API key is (``GET /api/v1/auth/whoami``)."""

    auth: str
    """``keys`` when API keys are configured, ``open`` when every route is open."""
    name: str | None
    """The key's name; null when no key was presented; ``anonymous`` in open mode."""
    scopes: list[str]
    """The effective scopes, sorted (``admin`` implies ``read`` and ``submit``); empty
    without a key."""


class WorkflowSubmit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/v1/workflows``: a workflow in its JSON form (docs/workflows.md)."""

    workflow: Annotated[
        dict[str, Any],
        msgspec.Meta(
            description="A step (the fields of a task submit, plus pass_result and "
            'on_failure), or {"chain": [...]}, {"group": [...]}, {"chord": {"header": [...], '
            '"callback": {...}}} of them, nested at will.',
            examples=[
                {
                    "chain": [
                        {"task": "etl.extract", "args": ["2026-12-01"]},
                        {"task": "etl.transform"},
                        {"task": "etl.load"},
                    ]
                }
            ],
        ),
    ]
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    on_failure: Literal["fail", "continue", "ignore"] = "fail"
    """What a failed step does (a step's own on_failure wins): ``fail`` the workflow and
    cancel the steps not started, ``continue`` (later steps receive its error value; the
    workflow ends failed) or ``ignore`` (they receive null)."""


class WorkflowSubmitted(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    status: WorkflowStatus
    steps: int
    """How many steps it has."""


_STEP_DOC = (
    "One step: the fields of a task submit (task, args, kwargs, queue, priority, ...), and "
    "pass_result (false: it gets no summary)."
)


class BatchCreate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/v1/batches``: a new open batch and its callbacks (docs/workflows.md,
    "Batches")."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    on_success: (
        Annotated[
            dict[str, Any],
            msgspec.Meta(
                description=_STEP_DOC + " Runs once, when the batch is sealed and every task "
                "in it succeeded.",
                examples=[{"task": "send_email", "kwargs": {"to": "ops@example.com"}}],
            ),
        ]
        | None
    ) = None
    on_complete: (
        Annotated[
            dict[str, Any],
            msgspec.Meta(
                description=_STEP_DOC + " Runs once, when the batch is sealed and every task "
                "in it ended, whatever happened.",
            ),
        ]
        | None
    ) = None


class BatchAdd(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /api/v1/batches/{id}/tasks``: tasks to add to an open batch."""

    tasks: Annotated[
        list[dict[str, Any]],
        msgspec.Meta(
            min_length=1,
            max_length=1000,
            description="Steps (the fields of a task submit), each one task.",
            examples=[[{"task": "export.user", "args": [42]}]],
        ),
    ]


class BatchAdded(msgspec.Struct, frozen=True, kw_only=True):
    task_ids: list[str | None]
    """The tasks' ids, in order (``null``: a full queue refused it for now; it waits in the
    batch and is submitted when the queue has room)."""


class Outcome(messages.Outcome[Any], frozen=True, kw_only=True):
    """How a task ended (``GET /api/v1/tasks/{id}/result``): the SDK's outcome, of any
    result."""

    result: Any = None


class WorkflowState(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    status: WorkflowStatus
