"""The stored task hash (``dtq_core.protocol.records``): ``decode_record`` of a missing hash, of a
hash an older version wrote, and of a finished task's hash."""

from __future__ import annotations

from datetime import UTC, datetime

from dtq_core.messages import (
    Progress,
    TaskStatus,
)
from dtq_core.names import make_task_id
from dtq_core.protocol.records import TASK_FIELDS, decode_record

RAND = "0123456789abcdef" * 2
T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _hash(**fields: str) -> list[str | None]:
    return [fields.get(f) for f in TASK_FIELDS]


def test_decode_record_of_a_missing_hash_is_none() -> None:
    assert decode_record("q", RAND, [None] * len(TASK_FIELDS)) is None


def test_decode_record_of_an_old_hash() -> None:
    """A hash written before newer fields existed (no exp, cxl, prog, w, rtr, meta)."""
    rec = decode_record(
        "emails",
        RAND,
        _hash(
            task="emails.send",
            st="queued",
            pri="7",
            att="0",
            max="3",
            to="30000",
            ct="1740830400123456",
            args='["a"]',
            kwargs="{}",
        ),
    )
    assert rec is not None
    assert rec.id == make_task_id("emails", RAND)
    assert rec.status is TaskStatus.QUEUED
    assert rec.priority == 7
    assert rec.timeout_s == 30.0
    assert rec.created_at == T0
    assert rec.args == ["a"]
    assert rec.progress is None
    assert rec.errors == []
    assert rec.finished_at is None
    assert rec.cancel_requested is False


def test_decode_record_of_a_finished_hash() -> None:
    err = '[{"attempt":1,"type":"E","message":"m","reason":"lease_expired","ts":"1"}]'
    rec = decode_record(
        "q",
        RAND,
        _hash(
            task="t",
            st="dead",
            pri="0",
            att="1",
            max="1",
            to="1000",
            ct="1740830400123456",
            sa="1740830400123456",
            ft="1740830400123456",
            due="1740830400123456",
            args="[]",
            kwargs="{}",
            meta='{"m":1}',
            err=err,
            prog='{"value":0.5}',
            w="w1",
            cxl="1",
            rtr="1",
            res='"r"',
        ),
    )
    assert rec is not None
    assert rec.finished_at == T0
    assert rec.started_at == T0
    assert rec.scheduled_for is None  # only for scheduled and retrying tasks
    assert rec.errors[0].reason == "lease_expired"
    assert rec.progress == Progress(value=0.5)
    assert rec.metadata == {"m": 1}
    assert rec.result == "r"
    assert rec.result_truncated is True
    assert rec.cancel_requested is True
    assert rec.worker == "w1"
