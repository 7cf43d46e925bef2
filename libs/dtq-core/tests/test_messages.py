"""Wire types: round trips, schema evolution with stored samples of older versions, statuses,
and the expansion of batched lifecycle events. The stored task hash: ``test_records``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from dtq_core.messages import (
    TERMINAL,
    TERMINAL_EVENTS,
    Event,
    Outcome,
    Progress,
    StoredError,
    SubmitResult,
    TaskError,
    TaskRecord,
    TaskRequest,
    TaskStatus,
    expand_events,
    micros_to_datetime,
    stream_id_seconds,
)
from dtq_core.names import make_task_id

RAND = "0123456789abcdef" * 2
T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)

WIRE_TYPES = (
    TaskError,
    StoredError,
    Progress,
    TaskRequest,
    TaskRecord,
    SubmitResult,
    Outcome,
    Event,
)


def _record(**over: Any) -> TaskRecord:
    fields: dict[str, Any] = {
        "id": make_task_id("emails", RAND),
        "task": "emails.send",
        "queue": "emails",
        "status": TaskStatus.DEAD,
        "priority": 7,
        "attempts": 2,
        "max_attempts": 2,
        "timeout_s": 30.0,
        "created_at": T0,
        "started_at": T0,
        "finished_at": T0,
        "args": ["a@b.c", 1, None, [1.5]],
        "kwargs": {"subject": "hi", "n": {"deep": True}},
        "metadata": {"tenant": "t1"},
        "result": None,
        "errors": [
            TaskError(
                attempt=1,
                type="ValueError",
                message="boom",
                traceback="tb",
                worker="w1",
                ts=T0,
            ),
            TaskError(attempt=2, type="LeaseExpired", message="gone", reason="lease_expired"),
        ],
        "progress": Progress(value=0.5, message="half"),
        "worker": "w1",
    }
    fields.update(over)
    return TaskRecord(**fields)


# -- round trips ------------------------------------------------------------------------------

SAMPLES: list[Any] = [
    TaskError(attempt=1, type="E", message="m"),
    TaskError(attempt=3, type="E", message="m", reason="timeout", traceback="t", worker="w", ts=T0),
    StoredError(attempt=1, type="E", message="m", ts="1740830400123456"),
    Progress(value=0.25),
    Progress(value=1.0, message="done"),
    TaskRequest(task="t"),
    TaskRequest(
        task="emails.send",
        args=["a", 1],
        kwargs={"k": [1, {"x": None}]},
        queue="emails",
        priority=9,
        delay_s=1.5,
        max_attempts=3,
        timeout_s=10.0,
        ttl_s=60.0,
        idempotency_key="order-1",
        metadata={"m": 1},
    ),
    TaskRequest(task="t", eta=T0),
    _record(),
    _record(
        status=TaskStatus.SUCCEEDED,
        result={"ok": [1, 2]},
        result_truncated=True,
        errors=[],
        progress=None,
    ),
    _record(
        status=TaskStatus.SCHEDULED,
        scheduled_for=T0,
        expires_at=T0,
        started_at=None,
        finished_at=None,
        cancel_requested=True,
    ),
    SubmitResult(id="q:" + RAND, queue="q", status=TaskStatus.QUEUED),
    SubmitResult(id="q:" + RAND, queue="q", status=TaskStatus.SCHEDULED, created=False),
    Outcome(id="q:" + RAND, status=TaskStatus.SUCCEEDED, attempts=1, result=[1]),
    Outcome(
        id="q:" + RAND,
        status=TaskStatus.DEAD,
        attempts=3,
        error=TaskError(attempt=3, type="E", message="m"),
    ),
    Event(type="task.queued", cursor="1-0/0", ts=1.5),
    Event(
        type="task.started",
        cursor="1700000000000-3/2",
        ts=1700000000.0,
        queue="q",
        task_id="q:" + RAND,
        task="t",
        attempt=2,
        worker="w1",
        reason="r",
        data={"progress": {"value": 0.5}},
    ),
]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).__name__)
def test_json_round_trip(sample: Any) -> None:
    encoded = msgspec.json.encode(sample)
    assert msgspec.json.decode(encoded, type=type(sample)) == sample


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).__name__)
def test_msgpack_round_trip(sample: Any) -> None:
    encoded = msgspec.msgpack.encode(sample)
    assert msgspec.msgpack.decode(encoded, type=type(sample)) == sample


@pytest.mark.parametrize("cls", WIRE_TYPES, ids=lambda c: c.__name__)
def test_wire_types_follow_the_evolution_rules(cls: type[msgspec.Struct]) -> None:
    config = cls.__struct_config__
    assert config.frozen
    assert not config.forbid_unknown_fields  # older readers must accept newer writers
    assert not config.array_like  # field order must not be part of the format


@pytest.mark.parametrize("cls", WIRE_TYPES, ids=lambda c: c.__name__)
def test_wire_types_are_keyword_only(cls: type[msgspec.Struct]) -> None:
    with pytest.raises(TypeError):
        cls("positional")


def test_wire_types_are_frozen() -> None:
    with pytest.raises(AttributeError):
        TaskRequest(task="t").priority = 1  # type: ignore[misc]


def test_task_request_defaults() -> None:
    req = TaskRequest(task="t")
    assert req.queue is None  # the client routes it to the task's registered queue
    assert req.priority == 5
    assert req.args == []
    assert req.kwargs == {}
    assert msgspec.json.encode(req) == b'{"task":"t"}'  # omit_defaults keeps requests small


def test_task_record_fields_of_the_contract() -> None:
    """A task as the API returns it (docs/api.md) has at least these fields."""
    names = {f.name for f in msgspec.structs.fields(TaskRecord)}
    assert {
        "id", "task", "queue", "status", "priority", "attempts", "max_attempts", "created_at",
        "started_at", "finished_at", "result", "result_truncated", "errors", "progress",
    } <= names  # fmt: skip
    assert {"id", "status", "queue"} <= {f.name for f in msgspec.structs.fields(SubmitResult)}


def test_event_fields_of_the_contract() -> None:
    names = {f.name for f in msgspec.structs.fields(Event)}
    assert {"type", "cursor", "ts", "queue", "task_id", "task", "attempt"} <= names


# -- schema evolution: encoded samples of older versions -------------------------------------

# A TaskRecord as the first release wrote it: no scheduled_for, progress, worker,
# cancel_requested or expires_at; plus a field a newer writer added that this reader lacks.
OLD_TASK_RECORD = (
    b'{"id":"emails:0123456789abcdef0123456789abcdef","task":"emails.send","queue":"emails",'
    b'"status":"succeeded","priority":5,"attempts":1,"max_attempts":3,"timeout_s":30.0,'
    b'"created_at":"2025-03-01T12:00:00.123456Z","started_at":"2025-03-01T12:00:01Z",'
    b'"finished_at":"2025-03-01T12:00:02Z","args":[1],"kwargs":{"a":"b"},"result":{"x":1},'
    b'"errors":[{"attempt":1,"type":"E","message":"m"}],'
    b'"shard":17,"labels":{"new":"field"}}'
)

# A TaskRequest as an old SDK (or a REST client) sends it: only the basics, plus an unknown
# field from a newer client.
OLD_TASK_REQUEST = b'{"task":"emails.send","args":["a@b.c"],"callback_url":"http://x"}'

OLD_TASK_ERROR = b'{"attempt":2,"type":"TimeoutError","message":"took too long"}'
OLD_EVENT = b'{"type":"task.queued","cursor":"1-0/0","ts":1.0,"region":"eu"}'
OLD_OUTCOME = b'{"id":"q:0123456789abcdef0123456789abcdef","status":"dead","attempts":3}'
OLD_SUBMIT_RESULT = b'{"id":"q:0123456789abcdef0123456789abcdef","queue":"q","status":"queued"}'


def test_stored_errors_read_as_rfc3339_times_to_the_microsecond() -> None:
    """The error history is stored with server microseconds (what a script can write); users
    get the same time format as every other time of a record."""
    stored = msgspec.json.decode(
        b'{"attempt":1,"type":"E","message":"m","ts":"1740830400123456"}', type=StoredError
    )
    view = stored.view()
    assert view.ts == T0
    assert b'"ts":"2025-03-01T12:00:00.123456Z"' in msgspec.json.encode(view)
    # Beyond a float's precision: 1.8e15 microseconds still decode exactly.
    assert micros_to_datetime("1796132397162117") == datetime(
        2026, 12, 1, 13, 39, 57, 162117, tzinfo=UTC
    )
    assert StoredError(attempt=1, type="E", message="m").view().ts is None


def test_old_task_record_decodes() -> None:
    rec = msgspec.json.decode(OLD_TASK_RECORD, type=TaskRecord)
    assert rec.id == make_task_id("emails", RAND)
    assert rec.status is TaskStatus.SUCCEEDED
    assert rec.created_at == T0
    assert rec.result == {"x": 1}
    assert rec.errors == [TaskError(attempt=1, type="E", message="m")]
    assert rec.errors[0].reason == "exception"
    # The newer optional fields take their defaults.
    assert rec.scheduled_for is None
    assert rec.progress is None
    assert rec.worker is None
    assert rec.cancel_requested is False
    assert rec.expires_at is None
    assert rec.metadata is None
    assert rec.result_truncated is False


def test_old_task_request_decodes() -> None:
    req = msgspec.json.decode(OLD_TASK_REQUEST, type=TaskRequest)
    assert req == TaskRequest(task="emails.send", args=["a@b.c"])
    assert req.queue is None  # the client routes it to the task's registered queue
    assert req.priority == 5
    assert req.idempotency_key is None
    assert req.eta is None


@pytest.mark.parametrize(
    ("raw", "cls"),
    [
        (OLD_TASK_ERROR, TaskError),
        (OLD_EVENT, Event),
        (OLD_OUTCOME, Outcome),
        (OLD_SUBMIT_RESULT, SubmitResult),
    ],
)
def test_old_samples_decode(raw: bytes, cls: type[msgspec.Struct]) -> None:
    value = msgspec.json.decode(raw, type=cls)
    assert isinstance(value, cls)
    assert msgspec.json.decode(msgspec.json.encode(value), type=cls) == value


def test_old_outcome_and_submit_result_defaults() -> None:
    out = msgspec.json.decode(OLD_OUTCOME, type=Outcome)
    assert out.error is None
    assert out.result is None
    assert not out.ok
    res = msgspec.json.decode(OLD_SUBMIT_RESULT, type=SubmitResult)
    assert res.created is True


def test_a_newer_reader_rejects_a_changed_type() -> None:
    """Types never change: a status outside the enum or a string attempt is an error."""
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"attempt":"1","type":"E","message":"m"}', type=TaskError)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(OLD_OUTCOME.replace(b'"dead"', b'"zombie"'), type=Outcome)


# -- status -----------------------------------------------------------------------------------


def test_statuses_are_designs() -> None:
    assert {s.value for s in TaskStatus} == {
        "scheduled", "queued", "running", "retrying", "succeeded", "dead", "failed",
        "cancelled", "expired",
    }  # fmt: skip
    assert {s.value for s in TERMINAL} == {"succeeded", "dead", "failed", "cancelled", "expired"}
    for s in TaskStatus:
        assert s.terminal is (s in TERMINAL)
    assert {f"task.{s}" for s in TERMINAL} == TERMINAL_EVENTS


def test_outcome_ok() -> None:
    assert Outcome(id="q:" + RAND, status=TaskStatus.SUCCEEDED, attempts=1).ok
    assert not Outcome(id="q:" + RAND, status=TaskStatus.FAILED, attempts=1).ok


def test_time_helpers() -> None:
    assert micros_to_datetime(None) is None
    assert micros_to_datetime("") is None
    assert micros_to_datetime("1740830400123456") == T0
    assert micros_to_datetime(b"1740830400123456") == T0
    assert stream_id_seconds("1700000000123-4") == 1700000000.123


# -- batched events ---------------------------------------------------------------------------


def test_expand_events_splits_a_batch() -> None:
    events = expand_events(
        "emails",
        "1700000000123-4",
        {
            "type": "task.started",
            "ids": f"{RAND},{'1' * 32},{'2' * 32}",
            "tasks": "a.x,b.y,c.z",
            "att": "1,3,2",
            "w": "w7",
        },
    )
    assert [e.cursor for e in events] == [f"1700000000123-4/{i}" for i in range(3)]
    assert [e.task_id for e in events] == [
        make_task_id("emails", RAND),
        make_task_id("emails", "1" * 32),
        make_task_id("emails", "2" * 32),
    ]
    assert [e.task for e in events] == ["a.x", "b.y", "c.z"]
    assert [e.attempt for e in events] == [1, 3, 2]
    assert {e.type for e in events} == {"task.started"}
    assert {e.worker for e in events} == {"w7"}
    assert {e.queue for e in events} == {"emails"}
    assert {e.ts for e in events} == {1700000000.123}


def test_expand_events_without_names_or_attempts() -> None:
    events = expand_events("q", "5-0", {"type": "task.expired", "ids": f"{RAND},{'1' * 32}"})
    assert [(e.task, e.attempt) for e in events] == [(None, None), (None, None)]
    assert [e.cursor for e in events] == ["5-0/0", "5-0/1"]


def test_expand_events_reason_and_progress() -> None:
    (requeued,) = expand_events(
        "q", "5-0", {"type": "task.requeued", "ids": RAND, "tasks": "t", "reason": "drain"}
    )
    assert requeued.reason == "drain"
    (prog,) = expand_events(
        "q",
        "6-1",
        {
            "type": "task.progress",
            "ids": RAND,
            "tasks": "t",
            "att": "2",
            "progress": '{"value":0.5,"message":"half"}',
        },
    )
    assert prog.data == {"progress": {"value": 0.5, "message": "half"}}
    assert prog.attempt == 2


def test_expand_events_of_an_entry_without_tasks() -> None:
    (event,) = expand_events(None, "7-0", {"type": "worker.stale", "worker": "w1", "age": "30"})
    assert event.cursor == "7-0/0"
    assert event.type == "worker.stale"
    assert event.worker == "w1"
    assert event.task_id is None
    assert event.data == {"worker": "w1", "age": "30"}


def test_expand_events_of_a_global_stream_keeps_the_bare_id() -> None:
    (event,) = expand_events(None, "7-0", {"type": "task.queued", "ids": RAND})
    assert event.task_id == RAND
    assert event.queue is None


def test_expanded_events_encode_as_frames() -> None:
    (event,) = expand_events("q", "8-0", {"type": "task.queued", "ids": RAND, "tasks": "t"})
    frame = msgspec.json.decode(msgspec.json.encode(event))
    assert {"type", "cursor", "ts", "queue", "task_id", "task"} <= set(frame)
    assert frame["cursor"] == "8-0/0"


def test_every_task_frame_carries_the_contract_fields() -> None:
    for fields in (
        {"type": "task.queued", "ids": RAND, "tasks": "t"},
        {"type": "task.started", "ids": RAND, "tasks": "t", "att": "1", "w": "w1"},
    ):
        (event,) = expand_events("q", "8-0", fields)
        frame = msgspec.json.decode(msgspec.json.encode(event))
        assert {"type", "cursor", "ts", "queue", "task_id", "task", "attempt"} <= set(frame)
