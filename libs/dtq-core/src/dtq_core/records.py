"""Decoding of stored task hashes into :class:`TaskRecord` (pure)."""

from __future__ import annotations

from typing import Any

import msgspec

from dtq_core.keys import make_task_id
from dtq_core.messages import (
    Progress,
    StoredError,
    TaskRecord,
    TaskStatus,
    micros_to_datetime,
)

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

_errors = msgspec.json.Decoder(list[StoredError])
_progress = msgspec.json.Decoder(Progress)


def _json(value: str | None, default: Any) -> Any:
    if value is None or value == "":
        return default
    return msgspec.json.decode(value)


def decode_record(queue: str, rand: str, values: list[str | None]) -> TaskRecord | None:
    """A :class:`TaskRecord` from ``HMGET key *TASK_FIELDS``; ``None`` if the hash is gone."""
    h = dict(zip(TASK_FIELDS, values, strict=True))
    if h["st"] is None or h["task"] is None:
        return None
    status = TaskStatus(h["st"])
    created = micros_to_datetime(h["ct"])
    if created is None:
        return None
    return TaskRecord(
        id=make_task_id(queue, rand),
        task=h["task"],
        queue=queue,
        status=status,
        priority=int(h["pri"] or 0),
        attempts=int(h["att"] or 0),
        max_attempts=int(h["max"]) if h["max"] and h["max"] != "0" else None,
        timeout_s=int(h["to"]) / 1000 if h["to"] and h["to"] != "0" else None,
        created_at=created,
        scheduled_for=micros_to_datetime(h["due"])
        if status in {TaskStatus.SCHEDULED, TaskStatus.RETRYING}
        else None,
        started_at=micros_to_datetime(h["sa"]),
        finished_at=micros_to_datetime(h["ft"]) if status.terminal else None,
        args=_json(h["args"], []),
        kwargs=_json(h["kwargs"], {}),
        metadata=_json(h["meta"], None),
        result=_json(h["res"], None),
        result_truncated=h["rtr"] == "1",
        errors=[e.view() for e in _errors.decode(h["err"])] if h["err"] else [],
        progress=_progress.decode(h["prog"]) if h["prog"] else None,
        worker=h["w"],
        cancel_requested=h["cxl"] == "1",
        expires_at=micros_to_datetime(h["exp"]),
    )
