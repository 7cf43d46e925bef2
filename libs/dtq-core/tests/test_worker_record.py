"""The worker registry record (pure): field names, encodings, and reading partial hashes."""

from __future__ import annotations

import msgspec

from dtq_core.protocol import workers
from dtq_core.protocol.workers import ROUTES_FIELD, WorkerRecord, group_of, process_id

RECORD = WorkerRecord(
    id="box-1:0a1b2c",
    worker_id="box-1",
    host="box",
    pid=42,
    queues=("emails", "default"),
    concurrency=50,
    inflight=3,
    prefetched=1,
    processed=100,
    failed=2,
    started_at=1_700_000_000_123_456,
    state="draining",
    version="0.1.0",
    routes='{"emails.send":"emails"}',
)


def _as_redis_returns(fields: dict[str, str | int]) -> dict[str, str | None]:
    """HSET stores integers as decimal strings; HGETALL returns strings."""
    return {k: str(v) for k, v in fields.items()}


def test_the_fields_are_the_ones_the_registry_hash_has_always_had() -> None:
    assert RECORD.to_fields() == {
        "id": "box-1:0a1b2c",
        "worker_id": "box-1",
        "host": "box",
        "pid": 42,
        "queues": "emails,default",
        "concurrency": 50,
        "inflight": 3,
        "prefetched": 1,
        "processed": 100,
        "failed": 2,
        "started_at": 1_700_000_000_123_456,
        "state": "draining",
        "version": "0.1.0",
        "slot": 0,
        "slots": 1,
        "restarts": 0,
        "supervisor": 0,
        "pool": 0,
        ROUTES_FIELD: '{"emails.send":"emails"}',
    }


def test_a_record_reads_back_as_written() -> None:
    assert WorkerRecord.from_fields(_as_redis_returns(RECORD.to_fields())) == RECORD


def test_a_missing_hash_reads_as_defaults() -> None:
    record = WorkerRecord.from_fields({})
    assert record == WorkerRecord()
    assert (record.queues, record.pid, record.started_at, record.routes) == ((), 0, 0, None)


def test_missing_and_unreadable_fields_take_their_defaults() -> None:
    record = WorkerRecord.from_fields(
        {"queues": "a,,b", "pid": "not-a-number", "inflight": None, "state": "running"}
    )
    assert record.queues == ("a", "b")
    assert (record.pid, record.inflight, record.state) == (0, 0, "running")
    assert record.routes is None


def test_no_routes_means_no_routes_field() -> None:
    fields = msgspec.structs.replace(RECORD, routes=None).to_fields()
    assert ROUTES_FIELD not in fields


def test_the_module_table_names_every_field() -> None:
    doc = workers.__doc__ or ""
    for name in RECORD.to_fields():
        assert f"``{name}``" in doc, name


def test_a_process_of_a_multi_process_worker_names_its_worker_and_slot() -> None:
    assert process_id("box-1:0a1b2c", 1, 0) == "box-1:0a1b2c/1"
    assert process_id("box-1:0a1b2c", 1, 3) == "box-1:0a1b2c/1.3"
    assert group_of("box-1:0a1b2c/1") == ("box-1:0a1b2c", 1)
    assert group_of("box-1:0a1b2c/1.3") == ("box-1:0a1b2c", 1)
    assert group_of("box-1:0a1b2c") == ("box-1:0a1b2c", None)
    assert group_of("box-1:0a1b2c/x") == ("box-1:0a1b2c", None)


def test_the_process_fields_read_back() -> None:
    record = msgspec.structs.replace(
        RECORD, id="w:0a1b2c/1.2", slot=1, slots=2, restarts=2, supervisor=7, pool=3
    )
    assert WorkerRecord.from_fields(_as_redis_returns(record.to_fields())) == record
