"""Decoding of stored task hashes into :class:`TaskRecord` and :class:`TaskSummary` (pure)."""

from __future__ import annotations

from typing import Any

import msgspec

from dtq_core.messages import (
    Progress,
    StoredError,
    TaskRecord,
    TaskStatus,
    TaskSummary,
    micros_to_datetime,
)
from dtq_core.names import make_task_id

TASK_FIELDS = (
    "task",
    "st",
    "pri",
    "att",
    "max",
    "to",
    "ct",
    "due",
    "sa",
    "ft",
    "args",
    "kwargs",
    "meta",
    "res",
    "rtr",
    "err",
    "prog",
    "w",
    "cxl",
    "exp",
)

BODY_FIELDS = ("args", "kwargs", "meta", "res", "err")
"""Fields a list never reads whole: their sizes are read instead (``HSTRLEN``)."""
SUMMARY_FIELDS = tuple(f for f in TASK_FIELDS if f not in BODY_FIELDS)
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


def _common(queue: str, rand: str, h: dict[str, str | None]) -> dict[str, Any] | None:
    """The fields a record and a summary share, from the hash's small fields; ``None`` if the
    hash is gone."""
    if h["st"] is None or h["task"] is None:
        return None
    status = TaskStatus(h["st"])
    created = micros_to_datetime(h["ct"])
    if created is None:
        return None
    return {
        "id": make_task_id(queue, rand),
        "task": h["task"],
        "queue": queue,
        "status": status,
        "priority": int(h["pri"] or 0),
        "attempts": int(h["att"] or 0),
        "max_attempts": int(h["max"]) if h["max"] and h["max"] != "0" else None,
        "timeout_s": int(h["to"]) / 1000 if h["to"] and h["to"] != "0" else None,
        "created_at": created,
        "scheduled_for": micros_to_datetime(h["due"])
        if status in {TaskStatus.SCHEDULED, TaskStatus.RETRYING}
        else None,
        "started_at": micros_to_datetime(h["sa"]),
        "finished_at": micros_to_datetime(h["ft"]) if status.terminal else None,
        "result_truncated": h["rtr"] == "1",
        "progress": _progress.decode(h["prog"]) if h["prog"] else None,
        "worker": h["w"],
        "cancel_requested": h["cxl"] == "1",
        "expires_at": micros_to_datetime(h["exp"]),
    }


def decode_record(queue: str, rand: str, values: list[str | None]) -> TaskRecord | None:
    """A :class:`TaskRecord` from ``HMGET key *TASK_FIELDS``; ``None`` if the hash is gone."""
    h = dict(zip(TASK_FIELDS, values, strict=True))
    common = _common(queue, rand, h)
    if common is None:
        return None
    return TaskRecord(
        **common,
        args=_json(h["args"], []),
        kwargs=_json(h["kwargs"], {}),
        metadata=_json(h["meta"], None),
        result=_json(h["res"], None),
        errors=[e.view() for e in _errors.decode(h["err"])] if h["err"] else [],
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
        args_bytes=size["args"],
        kwargs_bytes=size["kwargs"],
        metadata_bytes=size["meta"],
        result_bytes=size["res"],
        errors_bytes=size["err"],
        error_count=len(history) if errors or not size["err"] else None,
        last_error=None
        if last is None
        else msgspec.structs.replace(
            last.view(), message=last.message[:MESSAGE_PREVIEW], traceback=None
        ),
    )
