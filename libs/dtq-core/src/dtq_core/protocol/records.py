"""Decoding of stored task hashes into :class:`TaskRecord` and :class:`TaskSummary` (pure)."""

from __future__ import annotations

from typing import Any

import msgspec

from dtq_core.infra.settings.rules import trace_link
from dtq_core.infra.tracing import header_trace_id
from dtq_core.messages import (
    Progress,
    StoredError,
    TaskRecord,
    TaskStatus,
    TaskSummary,
    micros_to_datetime,
)
from dtq_core.names import logical_queue, make_task_id
from dtq_core.protocol.fields import TaskField

TASK_FIELDS: tuple[TaskField, ...] = (
    TaskField.TASK,
    TaskField.STATUS,
    TaskField.PRIORITY,
    TaskField.ATTEMPTS,
    TaskField.MAX_ATTEMPTS,
    TaskField.TIMEOUT_MS,
    TaskField.CREATED_AT,
    TaskField.DUE_AT,
    TaskField.STARTED_AT,
    TaskField.FINISHED_AT,
    TaskField.ARGS,
    TaskField.KWARGS,
    TaskField.METADATA,
    TaskField.RESULT,
    TaskField.RESULT_TRUNCATED,
    TaskField.ERRORS,
    TaskField.PROGRESS,
    TaskField.WORKER,
    TaskField.CANCEL_REQUESTED,
    TaskField.EXPIRES_AT,
    TaskField.GROUP,
    TaskField.WORKFLOW,
    TaskField.CHILDREN_WORKFLOW,
    TaskField.HEADERS,
)
"""The fields a record is decoded from (``HMGET``), in this order."""

BODY_FIELDS = (
    TaskField.ARGS,
    TaskField.KWARGS,
    TaskField.METADATA,
    TaskField.RESULT,
    TaskField.ERRORS,
)
"""Fields a list never reads whole: their sizes are read instead (``HSTRLEN``)."""
RECORD_ONLY = (*BODY_FIELDS, TaskField.HEADERS)
"""Fields a list does not read: the bodies, and the headers a record's trace id comes from."""
SUMMARY_FIELDS = tuple(f for f in TASK_FIELDS if f not in RECORD_ONLY)
ERRORS_READ_MAX = 64 * 1024
"""A summary reads an error history up to this size for its last error (the worker caps an
attempt's error near 5 KB, so this is about a dozen failed attempts)."""
MESSAGE_PREVIEW = 200
"""Characters of the last error's message a summary carries."""

_errors = msgspec.json.Decoder(list[StoredError])
_progress = msgspec.json.Decoder(Progress)


def _json(value: str | None, default: Any) -> Any:
    if value is None or value == "":
        return default
    return msgspec.json.decode(value)


def _set(value: str | None) -> int | None:
    """A count or duration the hash leaves absent or ``0`` when the task's default applies."""
    return int(value) if value and value != "0" else None


def _common(queue: str, rand: str, h: dict[TaskField, str | None]) -> dict[str, Any] | None:
    """The fields a record and a summary share, from the hash's small fields; ``None`` if the
    hash is gone."""
    st, task, progress = h[TaskField.STATUS], h[TaskField.TASK], h[TaskField.PROGRESS]
    if st is None or task is None:
        return None
    status = TaskStatus(st)
    created = micros_to_datetime(h[TaskField.CREATED_AT])
    if created is None:
        return None
    timeout_ms = _set(h[TaskField.TIMEOUT_MS])
    return {
        "id": make_task_id(queue, rand),
        "task": task,
        "queue": logical_queue(queue),  # a partition's task belongs to its queue
        "status": status,
        "priority": int(h[TaskField.PRIORITY] or 0),
        "attempts": int(h[TaskField.ATTEMPTS] or 0),
        "max_attempts": _set(h[TaskField.MAX_ATTEMPTS]),
        "timeout_s": timeout_ms / 1000 if timeout_ms is not None else None,
        "created_at": created,
        "scheduled_for": micros_to_datetime(h[TaskField.DUE_AT])
        if status in {TaskStatus.SCHEDULED, TaskStatus.RETRYING}
        else None,
        "started_at": micros_to_datetime(h[TaskField.STARTED_AT]),
        "finished_at": micros_to_datetime(h[TaskField.FINISHED_AT]) if status.terminal else None,
        "result_truncated": h[TaskField.RESULT_TRUNCATED] == "1",
        "progress": _progress.decode(progress) if progress else None,
        "worker": h[TaskField.WORKER],
        "cancel_requested": h[TaskField.CANCEL_REQUESTED] == "1",
        "expires_at": micros_to_datetime(h[TaskField.EXPIRES_AT]),
        "group": h[TaskField.GROUP],
        **_workflow(h[TaskField.WORKFLOW]),
        "children_workflow_id": h[TaskField.CHILDREN_WORKFLOW],
    }


def _workflow(value: str | None) -> dict[str, Any]:
    """``workflow_id`` and ``workflow_step`` of a workflow's step (field ``wf``)."""
    if not value:
        return {}
    workflow_id, _, step = value.partition(":")
    return {"workflow_id": workflow_id, "workflow_step": int(step)}


def decode_record(
    queue: str, rand: str, values: list[str | None], trace_url: str = ""
) -> TaskRecord | None:
    """A :class:`TaskRecord` from ``HMGET key *TASK_FIELDS``; ``None`` if the hash is gone.

    The trace id is the one of the ``traceparent`` its headers carry (no field of its own:
    an untraced task spends no byte on it); ``trace_url`` is ``DTQ_TRACE_URL``."""
    h = dict(zip(TASK_FIELDS, values, strict=True))
    common = _common(queue, rand, h)
    if common is None:
        return None
    errors = h[TaskField.ERRORS]
    headers = h[TaskField.HEADERS]
    trace_id = header_trace_id(headers) if headers else None
    return TaskRecord(
        trace_id=trace_id,
        trace_url=trace_link(trace_url, trace_id),
        **common,
        args=_json(h[TaskField.ARGS], []),
        kwargs=_json(h[TaskField.KWARGS], {}),
        metadata=_json(h[TaskField.METADATA], None),
        result=_json(h[TaskField.RESULT], None),
        errors=[e.view() for e in _errors.decode(errors)] if errors else [],
    )


def decode_summary(
    queue: str,
    rand: str,
    values: list[str | None],
    sizes: list[int],
    errors: str | None,
) -> TaskSummary | None:
    """A :class:`TaskSummary` from ``HMGET key *SUMMARY_FIELDS``, the ``HSTRLEN`` of each of
    :data:`BODY_FIELDS`, and the error history when it was read (``None`` when it was too large
    or there is none); ``None`` if the hash is gone."""
    common = _common(queue, rand, dict(zip(SUMMARY_FIELDS, values, strict=True)))
    if common is None:
        return None
    size = dict(zip(BODY_FIELDS, sizes, strict=True))
    history = _errors.decode(errors) if errors else []
    last = history[-1] if history else None
    return TaskSummary(
        **common,
        args_bytes=size[TaskField.ARGS],
        kwargs_bytes=size[TaskField.KWARGS],
        metadata_bytes=size[TaskField.METADATA],
        result_bytes=size[TaskField.RESULT],
        errors_bytes=size[TaskField.ERRORS],
        error_count=len(history) if errors or not size[TaskField.ERRORS] else None,
        last_error=None
        if last is None
        else msgspec.structs.replace(
            last.view(), message=last.message[:MESSAGE_PREVIEW], traceback=None
        ),
    )
