"""Validation and encoding of submissions, and the submit function's reply (pure: no Redis,
no event loop).

The SDK and the REST API both go through :func:`prepare`, so a task is checked by the same
rules whichever way it arrives, and nothing is written unless every check passed. What it
yields, :class:`Prepared`, names each value the submit function takes per task;
:data:`SUBMIT_ARGV` is the one place that puts them in the order of ``lua/submit.lua``.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

import msgspec

from dtq_core.errors import (
    DtqError,
    IdempotencyConflictError,
    InvalidNameError,
    PayloadTooLargeError,
    QueueFullError,
    ValidationError,
)
from dtq_core.infra.settings import Settings
from dtq_core.messages import SubmitResult, TaskRequest, TaskStatus
from dtq_core.names import NAME_PATTERN, PRIORITIES, logical_queue, make_task_id, valid_name
from dtq_core.protocol.outcomes import SubmitOutcome

IDEMPOTENCY_KEY_MAX = 256
GROUP_MAX = 128
"""Bytes of a group name at most (it is part of its keys' names)."""
MAX_TIMEOUT_S = 3600.0
MAX_ATTEMPTS_CAP = 1000

_encoder = msgspec.json.Encoder(order="deterministic")


class Prepared(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A validated task, encoded for the submit function: the queue it goes to, and the values
    the function takes for it (see ``lua/submit.lua``'s header for what each one means).

    Never encoded or sent as a whole: :func:`extend_argv` lays the values out as ARGV. Its
    fields hold strings, bytes and integers only, so it can stay out of the garbage
    collector's tracking (``gc=False``), one object less per task for a full collection to walk.
    """

    queue: str
    rand: str
    """The random part of the new task's id (the id is ``<queue>:<rand>``)."""
    task: str
    priority: int
    delay_ms: int
    """0: queued at once; otherwise scheduled that far ahead."""
    max_attempts: int
    """0: left to the task's default, resolved by the worker that claims it."""
    timeout_ms: int
    """0: left to the task's default, like ``max_attempts``."""
    ttl_ms: int
    """0: the task never expires before it starts."""
    args: bytes
    kwargs: bytes
    metadata: bytes
    """JSON, or empty when the request has none."""
    headers: str
    """Trace-context headers as JSON, or empty when the submit is not traced."""
    idem: str
    """``""``, or ``<sha256 of the idempotency key>|<fingerprint of the request>``."""
    dedup: str = ""
    """``""``, or ``<mode>|<sha256 of the dedup key>|<window ms>`` (mode ``u``, ``d``, ``t``:
    until_finished, debounce, throttle)."""
    group: str = ""
    """The task's group, or empty."""
    wf: str = ""
    """``<workflow id>:<step>`` for a workflow's step (its rand derives from both: submitted
    again, it finds itself), or empty."""


SUBMIT_ARGV = (
    "rand",
    "task",
    "priority",
    "delay_ms",
    "max_attempts",
    "timeout_ms",
    "ttl_ms",
    "args",
    "kwargs",
    "metadata",
    "headers",
    "idem",
    "dedup",
    "group",
    "wf",
)
"""The :class:`Prepared` fields the submit function takes per task, in its ARGV order."""

FIELDS_PER_TASK = len(SUBMIT_ARGV)

SUBMIT_REPLY = ("outcome", "rand", "status")
"""What the submit function answers per task, in order (see ``lua/submit.lua``)."""

# One C call per task builds its ARGV slice (no per-field Python loop on the hot path).
_argv_of = attrgetter(*SUBMIT_ARGV)


def extend_argv(argv: list[Any], prepared: Sequence[Prepared]) -> list[Any]:
    """Append the per-task part of one submit call's ARGV to ``argv`` (and return it): each
    task's values in :data:`SUBMIT_ARGV` order, one task after the other."""
    for p in prepared:
        argv.extend(_argv_of(p))
    return argv


def new_rands(n: int) -> list[str]:
    """``n`` random 128-bit ids in one syscall (``uuid4`` costs one syscall per id)."""
    raw = os.urandom(16 * n).hex()
    return [raw[i * 32 : (i + 1) * 32] for i in range(n)]


def check_name(kind: str, name: object) -> None:
    if not isinstance(name, str) or not valid_name(name):
        raise InvalidNameError(
            f"{kind} name {name!r} is invalid: it must match {NAME_PATTERN} "
            "(letters, digits, '_', '.', '-'; at most 64 characters; no '{', '}', ':' or spaces)",
            field=kind,
        )


def _number(field: str, value: object, *, low: float, high: float, low_open: bool) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{field} must be a finite number, got {value!r}", field=field)
    if (value <= low if low_open else value < low) or value > high:
        bound = f"> {low}" if low_open else f">= {low}"
        raise ValidationError(f"{field} must be {bound} and <= {high}, got {value!r}", field=field)


def _encode(field: str, value: Any) -> bytes:
    try:
        return _encoder.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"{field} is not JSON-encodable: {exc}", field=field) from None


def delay_ms(req: TaskRequest, settings: Settings, now: datetime | None = None) -> int:
    """The delay in ms, from ``delay_s`` or ``eta`` (at most one of them)."""
    if req.delay_s is not None and req.eta is not None:
        raise ValidationError("give delay_s or eta, not both", field="eta")
    limit = settings.tasks.retention_s
    if req.eta is not None:
        eta = req.eta if req.eta.tzinfo else req.eta.replace(tzinfo=UTC)
        seconds = (eta - (now or datetime.now(UTC))).total_seconds()
        if seconds > limit:
            raise ValidationError(
                f"eta is {seconds:.0f} s away, beyond DTQ_TASK_RETENTION_S={limit}: the task's "
                "record would expire before it runs",
                field="eta",
            )
        return max(0, math.ceil(seconds * 1000))
    _number("delay_s", req.delay_s, low=0, high=limit, low_open=False)
    return math.ceil((req.delay_s or 0) * 1000)


def fingerprint(req: TaskRequest) -> str:
    """SHA-256 of the request without its idempotency key (same key + same request = replay)."""
    body = msgspec.structs.replace(req, idempotency_key=None)
    return hashlib.sha256(_encoder.encode(body)).hexdigest()


def prepare(
    req: TaskRequest,
    settings: Settings,
    rand: str,
    *,
    headers: str = "",
    default_max_attempts: int | None = None,
    default_timeout_s: float | None = None,
    wf: str = "",
) -> Prepared:
    """Validate ``req`` and encode it for the submit function.

    Args:
        req: the task.
        settings: limits and defaults.
        rand: the random part of the new task's id.
        headers: trace-context headers, JSON (empty: none).
        default_max_attempts, default_timeout_s: a registered task definition's defaults,
            used when the request sets none.
        wf: ``<workflow id>:<step>`` when the task is a workflow's step.

    Raises:
        InvalidNameError, PayloadTooLargeError, ValidationError: nothing may be written.
    """
    check_name("task", req.task)
    # The client routes a request that names no queue before it gets here.
    queue = req.queue if req.queue is not None else "default"
    check_name("queue", queue)
    # TaskRequest's types are not enforced when it is built in Python: check them here.
    priority: object = req.priority
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not 0 <= priority < PRIORITIES
    ):
        raise ValidationError(
            f"priority must be an integer from 0 to 9 (9 runs first), got {req.priority!r}",
            field="priority",
        )
    max_attempts = _attempts(
        req.max_attempts if req.max_attempts is not None else default_max_attempts
    )
    timeout_s = req.timeout_s if req.timeout_s is not None else default_timeout_s
    _number("timeout_s", timeout_s, low=0, high=MAX_TIMEOUT_S, low_open=True)
    _number("ttl_s", req.ttl_s, low=0, high=settings.tasks.retention_s, low_open=True)
    delay = delay_ms(req, settings)
    dedup = _dedup(req, settings)
    if dedup.startswith("d|"):
        delay = int(dedup.rpartition("|")[2])  # a debounced task runs debounce_s after
    args, kwargs, metadata = _payload(req, settings)
    return Prepared(
        queue=queue,
        rand=rand,
        task=req.task,
        priority=req.priority,
        delay_ms=delay,
        max_attempts=max_attempts,
        timeout_ms=math.ceil(timeout_s * 1000) if timeout_s is not None else 0,
        ttl_ms=math.ceil(req.ttl_s * 1000) if req.ttl_s is not None else 0,
        args=args,
        kwargs=kwargs,
        metadata=metadata,
        headers=headers,
        idem=_idempotency(req),
        dedup=dedup,
        group=check_group(req.group),
        wf=wf,
    )


def _attempts(value: object) -> int:
    """``max_attempts`` of :class:`Prepared`, checked."""
    # 0 stands for "the task's default": the worker that claims it resolves it from its
    # registry (a REST client cannot know what the handler declares).
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_CAP:
        raise ValidationError(
            f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_CAP}, got {value!r}",
            field="max_attempts",
        )
    return value


def _payload(req: TaskRequest, settings: Settings) -> tuple[bytes, bytes, bytes]:
    """The JSON of args, kwargs and metadata (empty without metadata), refused together past
    DTQ_MAX_PAYLOAD_BYTES."""
    args_in: object = req.args
    kwargs_in: object = req.kwargs
    if not isinstance(args_in, list | tuple):
        raise ValidationError("args must be a list", field="args")
    if not isinstance(kwargs_in, dict) or not all(isinstance(k, str) for k in kwargs_in):
        raise ValidationError("kwargs must be an object with string keys", field="kwargs")
    args = _encode("args", req.args)
    kwargs = _encode("kwargs", req.kwargs)
    meta = _encode("metadata", req.metadata) if req.metadata is not None else b""
    size = len(args) + len(kwargs) + len(meta)
    if size > settings.tasks.max_payload_bytes:
        raise PayloadTooLargeError(
            f"args, kwargs and metadata take {size} bytes as JSON; the limit is "
            f"DTQ_MAX_PAYLOAD_BYTES={settings.tasks.max_payload_bytes}",
            field="args",
            size=size,
            limit=settings.tasks.max_payload_bytes,
        )
    return args, kwargs, meta


DEDUP_MODES = {"until_finished": "u", "debounce": "d", "throttle": "t"}


def _dedup(req: TaskRequest, settings: Settings) -> str:
    """``dedup`` of :class:`Prepared`: empty without a mode."""
    mode: object = req.dedup
    if mode is None:
        for name in ("dedup_key", "debounce_s", "throttle_s"):
            if getattr(req, name) is not None:
                raise ValidationError(f"{name} needs a dedup mode", field=name)
        return ""
    if mode not in DEDUP_MODES:
        raise ValidationError(
            f"dedup must be until_finished, debounce or throttle, got {mode!r}", field="dedup"
        )
    key: object = req.dedup_key
    if not isinstance(key, str) or not key or len(key.encode()) > IDEMPOTENCY_KEY_MAX:
        raise ValidationError(
            f"dedup={mode} needs a dedup_key of 1 to {IDEMPOTENCY_KEY_MAX} bytes",
            field="dedup_key",
        )
    window_ms = 0
    limit = settings.tasks.retention_s
    wanted = {"debounce": "debounce_s", "throttle": "throttle_s"}.get(mode)
    for name in ("debounce_s", "throttle_s"):
        value = getattr(req, name)
        if name == wanted:
            if value is None:
                raise ValidationError(f"dedup={mode} needs {name}", field=name)
            _number(name, value, low=0, high=limit, low_open=True)
            window_ms = math.ceil(value * 1000)
        elif value is not None:
            raise ValidationError(f"{name} goes with dedup={name[:-2]}", field=name)
    if mode == "debounce" and (req.delay_s is not None or req.eta is not None):
        raise ValidationError(
            "dedup=debounce sets the delay itself (debounce_s): give no delay_s or eta",
            field="delay_s",
        )
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{DEDUP_MODES[mode]}|{digest}|{window_ms}"


def check_group(group: object) -> str:
    """``group`` of :class:`Prepared` (empty without one), checked.

    Raises:
        ValidationError: not a string of 1 to GROUP_MAX bytes without '/' (a group is a path
            segment of the REST API) or control characters.
    """
    if group is None:
        return ""
    if (
        not isinstance(group, str)
        or not group
        or len(group.encode()) > GROUP_MAX
        or not group.isprintable()
        or "/" in group
    ):
        raise ValidationError(
            f"group must be a string of 1 to {GROUP_MAX} bytes, without '/' or control "
            f"characters, got {group!r}",
            field="group",
        )
    return group


def _idempotency(req: TaskRequest) -> str:
    """``idem`` of :class:`Prepared`: empty without a key."""
    if req.idempotency_key is None:
        return ""
    key: object = req.idempotency_key
    if not isinstance(key, str) or not key or len(key.encode()) > IDEMPOTENCY_KEY_MAX:
        raise ValidationError(
            f"idempotency_key must be 1 to {IDEMPOTENCY_KEY_MAX} bytes", field="idempotency_key"
        )
    # Hashed before it becomes part of a key name: no key injection, bounded length.
    return hashlib.sha256(key.encode()).hexdigest() + "|" + fingerprint(req)


_STATUS = {s.value: s for s in TaskStatus}


def read_reply(
    queue: str, reply: Sequence[str], *, max_depth: int, own: bool = False
) -> list[SubmitResult | DtqError]:
    """What one submit call into ``queue`` answered for each of its tasks, in order.

    Args:
        reply: the function's reply, :data:`SUBMIT_REPLY` per task.
        max_depth: the limit the call was made under (a refusal names it).
        own: it is the queue's own ``max_depth``, not the producer's DTQ_MAX_QUEUE_DEPTH.
    """
    out: list[SubmitResult | DtqError] = []
    stored, queue = queue, logical_queue(queue)  # a partition answers for its queue
    for i in range(0, len(reply), len(SUBMIT_REPLY)):
        outcome, rand, status = reply[i : i + len(SUBMIT_REPLY)]
        task_id = make_task_id(stored, rand)
        if outcome == SubmitOutcome.NEW:
            out.append(SubmitResult(id=task_id, queue=queue, status=_STATUS[status]))
        elif outcome == SubmitOutcome.DUPLICATE:
            out.append(SubmitResult(id=task_id, queue=queue, status=_STATUS[status], created=False))
        elif outcome in (SubmitOutcome.ORIGINAL, SubmitOutcome.REPLACED):
            out.append(
                SubmitResult(
                    id=task_id,
                    queue=queue,
                    status=_STATUS[status],
                    created=False,
                    dedup=str(outcome),
                )
            )
        elif outcome == SubmitOutcome.CONFLICT:
            out.append(
                IdempotencyConflictError(
                    "the idempotency key was already used with a different request "
                    f"(task {task_id})",
                    task_id=task_id,
                )
            )
        else:
            out.append(
                QueueFullError(
                    f"queue {queue!r} holds "
                    + (f"its max_depth={max_depth}" if own else f"DTQ_MAX_QUEUE_DEPTH={max_depth}")
                    + " waiting tasks (delayed ones included); retry later",
                    queue=queue,
                    limit=max_depth,
                )
            )
    return out
