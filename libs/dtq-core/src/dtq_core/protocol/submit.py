"""Validation and encoding of submissions (pure: no Redis, no event loop).

The SDK and the REST API both go through :func:`prepare`, so a task is checked by the same
rules whichever way it arrives, and nothing is written unless every check passed.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from dtq_core.errors import InvalidNameError, PayloadTooLargeError, ValidationError
from dtq_core.infra.settings import Settings
from dtq_core.messages import TaskRequest
from dtq_core.names import NAME_PATTERN, PRIORITIES, valid_name

IDEMPOTENCY_KEY_MAX = 256
MAX_TIMEOUT_S = 3600.0
MAX_ATTEMPTS_CAP = 1000
FIELDS_PER_TASK = 12

_encoder = msgspec.json.Encoder(order="deterministic")


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated task, encoded as the submit script's 12 per-task values."""

    queue: str
    rand: str
    values: tuple[Any, ...]


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
    defaults: tuple[int | None, float | None] = (None, None),
) -> Prepared:
    """Validate ``req`` and encode it for the submit script.

    Args:
        req: the task.
        settings: limits and defaults.
        rand: the random part of the new task's id.
        headers: trace-context headers, JSON (empty: none).
        defaults: ``(max_attempts, timeout_s)`` of a registered task definition, used when
            the request sets none.

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
    # 0 stands for "the task's default": the worker that claims it resolves it from its
    # registry (a REST client cannot know what the handler declares).
    max_attempts: object = req.max_attempts if req.max_attempts is not None else defaults[0]
    if max_attempts is None:
        max_attempts = 0
    elif (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not (1 <= max_attempts <= MAX_ATTEMPTS_CAP)
    ):
        raise ValidationError(
            f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_CAP}, got {max_attempts!r}",
            field="max_attempts",
        )
    timeout_s = req.timeout_s if req.timeout_s is not None else defaults[1]
    _number("timeout_s", timeout_s, low=0, high=MAX_TIMEOUT_S, low_open=True)
    timeout_ms = math.ceil(timeout_s * 1000) if timeout_s is not None else 0
    _number("ttl_s", req.ttl_s, low=0, high=settings.tasks.retention_s, low_open=True)
    ttl_ms = math.ceil(req.ttl_s * 1000) if req.ttl_s is not None else 0
    delay = delay_ms(req, settings)
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
    idem = ""
    if req.idempotency_key is not None:
        key: object = req.idempotency_key
        if not isinstance(key, str) or not key or len(key.encode()) > IDEMPOTENCY_KEY_MAX:
            raise ValidationError(
                f"idempotency_key must be 1 to {IDEMPOTENCY_KEY_MAX} bytes", field="idempotency_key"
            )
        # Hashed before it becomes part of a key name: no key injection, bounded length.
        idem = hashlib.sha256(key.encode()).hexdigest() + "|" + fingerprint(req)
    values = (
        rand,
        req.task,
        req.priority,
        delay,
        max_attempts,
        timeout_ms,
        ttl_ms,
        args,
        kwargs,
        meta,
        headers,
        idem,
    )
    return Prepared(queue, rand, values)


def flatten(prepared: Sequence[Prepared]) -> list[Any]:
    out: list[Any] = []
    for p in prepared:
        out.extend(p.values)
    return out
