"""Submission validation and encoding (pure): the rules every task passes, SDK or REST."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from dtq_core.errors import (
    IdempotencyConflictError,
    InvalidNameError,
    PayloadTooLargeError,
    QueueFullError,
    ValidationError,
)
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import SubmitResult, TaskRequest, TaskStatus
from dtq_core.protocol.submit import (
    FIELDS_PER_TASK,
    IDEMPOTENCY_KEY_MAX,
    MAX_ATTEMPTS_CAP,
    MAX_TIMEOUT_S,
    SUBMIT_ARGV,
    Prepared,
    delay_ms,
    extend_argv,
    fingerprint,
    new_rands,
    prepare,
    read_reply,
)

RAND = "0123456789abcdef" * 2
FIELDS = ("rand", "task", "priority", "delay_ms", "max_attempts", "timeout_ms", "ttl_ms", "args",
          "kwargs", "metadata", "headers", "idem", "dedup", "group", "wf")  # fmt: skip
"""The submit function's per-task ARGV, as the header of lua/submit.lua lists it."""


@pytest.fixture(scope="module")
def st() -> Settings:
    return load_settings({})


def _values(p: Prepared) -> dict[str, Any]:
    """The ARGV values of one prepared task, by name."""
    values = extend_argv([], [p])
    assert len(values) == FIELDS_PER_TASK
    return dict(zip(FIELDS, values, strict=True))


def _prep(st: Settings, **kw: Any) -> dict[str, Any]:
    kw.setdefault("task", "emails.send")
    return _values(prepare(TaskRequest(**kw), st, RAND))


def test_the_argv_order_is_the_scripts() -> None:
    assert SUBMIT_ARGV == FIELDS


def test_prepare_encodes_the_script_values(st: Settings) -> None:
    p = prepare(
        TaskRequest(
            task="emails.send",
            args=["a@b.c"],
            kwargs={"subject": "hi"},
            queue="emails",
            priority=7,
            metadata={"tenant": "t1"},
        ),
        st,
        RAND,
        headers='{"traceparent":"x"}',
    )
    assert p.queue == "emails"
    assert p.rand == RAND
    v = _values(p)
    assert v["rand"] == RAND
    assert v["task"] == "emails.send"
    assert v["priority"] == 7
    assert v["delay_ms"] == 0
    # 0: left to the task's default, resolved by the worker that claims it.
    assert v["max_attempts"] == 0
    assert v["timeout_ms"] == 0
    assert v["ttl_ms"] == 0
    assert msgspec.json.decode(v["args"]) == ["a@b.c"]
    assert msgspec.json.decode(v["kwargs"]) == {"subject": "hi"}
    assert msgspec.json.decode(v["metadata"]) == {"tenant": "t1"}
    assert v["headers"] == '{"traceparent":"x"}'
    assert v["idem"] == ""


def test_argv_keeps_order() -> None:
    st = load_settings({})
    ps = [
        prepare(TaskRequest(task="t", priority=p), st, r)
        for p, r in zip((1, 2), new_rands(2), strict=True)
    ]
    flat = extend_argv([], ps)
    assert len(flat) == 2 * FIELDS_PER_TASK
    assert flat[2] == 1
    assert flat[FIELDS_PER_TASK + 2] == 2


def test_no_metadata_is_empty(st: Settings) -> None:
    assert _prep(st)["metadata"] == b""


def test_registered_defaults_apply_and_requests_win(st: Settings) -> None:
    p = prepare(TaskRequest(task="t"), st, RAND, default_max_attempts=3, default_timeout_s=2.5)
    assert (p.max_attempts, p.timeout_ms) == (3, 2500)
    p = prepare(
        TaskRequest(task="t", max_attempts=7, timeout_s=1),
        st,
        RAND,
        default_max_attempts=3,
        default_timeout_s=2.5,
    )
    assert (p.max_attempts, p.timeout_ms) == (7, 1000)


# -- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["a:b", "{x}", "a}b", "*", "a b", "a\n", "a\0", "é", "\u0430", "x" * 65, "", ".x"]
)
def test_invalid_task_name(st: Settings, name: str) -> None:
    with pytest.raises(InvalidNameError) as exc:
        _prep(st, task=name)
    assert exc.value.field == "task"
    assert exc.value.code == "invalid_name"
    assert repr(name) in str(exc.value)


@pytest.mark.parametrize("name", ["a:b", "{x}", "a}b", "*", "a b", "\n", "é", "x" * 65, ""])
def test_invalid_queue_name(st: Settings, name: str) -> None:
    with pytest.raises(InvalidNameError) as exc:
        _prep(st, queue=name)
    assert exc.value.field == "queue"


def test_non_string_name(st: Settings) -> None:
    with pytest.raises(InvalidNameError):
        _prep(st, task=5)


# -- priority ---------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", [0, 9])
def test_priority_bounds_accepted(st: Settings, priority: int) -> None:
    assert _prep(st, priority=priority)["priority"] == priority


@pytest.mark.parametrize("priority", [-1, 10, True, False, "5", 5.0, None])
def test_invalid_priority(st: Settings, priority: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        _prep(st, priority=priority)
    assert exc.value.field == "priority"
    assert "0 to 9" in str(exc.value)


# -- delay and eta ----------------------------------------------------------------------------


def test_delay_is_in_whole_ms_rounded_up(st: Settings) -> None:
    assert _prep(st, delay_s=1.5)["delay_ms"] == 1500
    assert _prep(st, delay_s=0.0001)["delay_ms"] == 1
    assert _prep(st, delay_s=0)["delay_ms"] == 0


@pytest.mark.parametrize("delay", [-1, -0.001, math.nan, math.inf, -math.inf, True, "5"])
def test_invalid_delay(st: Settings, delay: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        _prep(st, delay_s=delay)
    assert exc.value.field == "delay_s"


def test_delay_up_to_the_retention(st: Settings) -> None:
    assert _prep(st, delay_s=st.tasks.retention_s)["delay_ms"] == st.tasks.retention_s * 1000
    with pytest.raises(ValidationError) as exc:
        _prep(st, delay_s=st.tasks.retention_s + 1)
    assert exc.value.field == "delay_s"
    assert str(st.tasks.retention_s) in str(exc.value)


def test_eta_in_the_past_runs_now(st: Settings) -> None:
    assert _prep(st, eta=datetime.now(UTC) - timedelta(hours=1))["delay_ms"] == 0


def test_eta_in_the_future(st: Settings) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    req = TaskRequest(task="t", eta=now + timedelta(seconds=90))
    assert delay_ms(req, st, now=now) == 90_000


def test_naive_eta_is_utc(st: Settings) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    req = TaskRequest(task="t", eta=datetime(2030, 1, 1, 0, 1))  # noqa: DTZ001 - on purpose
    assert delay_ms(req, st, now=now) == 60_000


def test_eta_beyond_the_retention_is_refused(st: Settings) -> None:
    eta = datetime.now(UTC) + timedelta(seconds=st.tasks.retention_s + 3600)
    with pytest.raises(ValidationError) as exc:
        _prep(st, eta=eta)
    assert exc.value.field == "eta"
    assert "DTQ_TASK_RETENTION_S" in str(exc.value)


def test_delay_and_eta_together_are_refused(st: Settings) -> None:
    with pytest.raises(ValidationError) as exc:
        _prep(st, delay_s=1, eta=datetime.now(UTC))
    assert exc.value.field == "eta"


# -- attempts, timeout, ttl -------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, MAX_ATTEMPTS_CAP])
def test_max_attempts_bounds_accepted(st: Settings, value: int) -> None:
    assert _prep(st, max_attempts=value)["max_attempts"] == value


@pytest.mark.parametrize("value", [0, -1, 1001, True, 2.0, "3"])
def test_invalid_max_attempts(st: Settings, value: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        _prep(st, max_attempts=value)
    assert exc.value.field == "max_attempts"
    assert "1000" in str(exc.value)


def test_invalid_default_max_attempts_is_refused_too(st: Settings) -> None:
    with pytest.raises(ValidationError):
        prepare(TaskRequest(task="t"), st, RAND, default_max_attempts=0)


@pytest.mark.parametrize("value", [0.001, 1, MAX_TIMEOUT_S])
def test_timeout_bounds_accepted(st: Settings, value: float) -> None:
    assert _prep(st, timeout_s=value)["timeout_ms"] == math.ceil(value * 1000)


@pytest.mark.parametrize("value", [0, -1, 3601, math.nan, math.inf, True])
def test_invalid_timeout(st: Settings, value: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        _prep(st, timeout_s=value)
    assert exc.value.field == "timeout_s"


def test_ttl(st: Settings) -> None:
    assert _prep(st, ttl_s=2.5)["ttl_ms"] == 2500
    for bad in (0, -1, math.nan, st.tasks.retention_s + 1):
        with pytest.raises(ValidationError) as exc:
            _prep(st, ttl_s=bad)
        assert exc.value.field == "ttl_s"


# -- payload ----------------------------------------------------------------------------------


def test_payload_over_the_limit_names_the_limit() -> None:
    st = load_settings({}, max_payload_bytes=1024)
    # ["x...x"] is len + 4 bytes of JSON, {} is 2: exactly 1024 bytes passes.
    assert _prep(st, args=["x" * 1018])["args"]
    with pytest.raises(PayloadTooLargeError) as exc:
        _prep(st, args=["x" * 1019])
    message = str(exc.value)
    assert "DTQ_MAX_PAYLOAD_BYTES=1024" in message
    assert "1025" in message
    assert exc.value.detail["limit"] == 1024
    assert exc.value.detail["size"] == 1025
    assert exc.value.code == "payload_too_large"


def test_payload_counts_kwargs_and_metadata() -> None:
    st = load_settings({}, max_payload_bytes=1024)
    with pytest.raises(PayloadTooLargeError):
        _prep(st, kwargs={"k": "x" * 1100})
    with pytest.raises(PayloadTooLargeError):
        _prep(st, args=["x" * 500], metadata={"m": "x" * 600})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("args", [object()]),
        ("args", [1j]),
        ("kwargs", {"k": object()}),
        ("metadata", {"m": object()}),
    ],
)
def test_non_json_payload(st: Settings, field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        _prep(st, **{field: value})
    assert exc.value.field == field
    assert "JSON" in str(exc.value)


def test_args_must_be_a_list_and_kwargs_an_object(st: Settings) -> None:
    with pytest.raises(ValidationError) as exc:
        _prep(st, args="abc")
    assert exc.value.field == "args"
    with pytest.raises(ValidationError) as exc:
        _prep(st, kwargs={1: "a"})
    assert exc.value.field == "kwargs"
    assert msgspec.json.decode(_prep(st, args=(1, 2))["args"]) == [1, 2]


# -- idempotency ------------------------------------------------------------------------------


def test_idempotency_key_is_hashed(st: Settings) -> None:
    key = "order-12345-SECRET"
    v = _prep(st, idempotency_key=key, args=[1])
    key_hash, _, fp = v["idem"].partition("|")
    assert key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert fp == fingerprint(TaskRequest(task="emails.send", args=[1], idempotency_key=key))
    for value in v.values():
        text = value.decode() if isinstance(value, bytes) else str(value)
        assert key not in text  # no raw key reaches Redis (no key-name injection)


def test_fingerprint_ignores_the_key_but_not_the_request() -> None:
    a = TaskRequest(task="t", args=[1], idempotency_key="k1")
    assert fingerprint(a) == fingerprint(TaskRequest(task="t", args=[1], idempotency_key="k2"))
    assert fingerprint(a) == fingerprint(TaskRequest(task="t", args=[1]))
    assert fingerprint(a) != fingerprint(TaskRequest(task="t", args=[2], idempotency_key="k1"))
    assert fingerprint(a) != fingerprint(TaskRequest(task="t", args=[1], priority=6))
    assert fingerprint(TaskRequest(task="t", kwargs={"a": 1, "b": 2})) == fingerprint(
        TaskRequest(task="t", kwargs={"b": 2, "a": 1})
    )


@pytest.mark.parametrize("key", ["", "x" * (IDEMPOTENCY_KEY_MAX + 1), "é" * 129, 5])
def test_invalid_idempotency_key(st: Settings, key: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        _prep(st, idempotency_key=key)
    assert exc.value.field == "idempotency_key"


def test_longest_idempotency_key(st: Settings) -> None:
    assert _prep(st, idempotency_key="x" * IDEMPOTENCY_KEY_MAX)["idem"]
    assert _prep(st, idempotency_key="é" * 128)["idem"]  # 256 bytes


def test_new_rands() -> None:
    rands = new_rands(1000)
    assert len(set(rands)) == 1000
    assert all(len(r) == 32 and int(r, 16) >= 0 for r in rands)
    assert new_rands(0) == []


# -- the submit function's answer -------------------------------------------------------------


def test_read_reply_gives_each_task_its_result_or_refusal() -> None:
    a, b, c, d = new_rands(4)
    results = read_reply(
        "q",
        ["new", a, "queued", "dup", b, "running", "conflict", c, "", "full", d, ""],
        max_depth=7,
    )
    assert results[0] == SubmitResult(id=f"q:{a}", queue="q", status=TaskStatus.QUEUED)
    assert results[1] == SubmitResult(
        id=f"q:{b}", queue="q", status=TaskStatus.RUNNING, created=False
    )
    conflict, full = results[2], results[3]
    assert isinstance(conflict, IdempotencyConflictError)
    assert conflict.detail["task_id"] == f"q:{c}"
    assert f"q:{c}" in str(conflict)
    assert isinstance(full, QueueFullError)
    assert "DTQ_MAX_QUEUE_DEPTH=7" in str(full)
    assert full.detail["limit"] == 7
    assert read_reply("q", [], max_depth=7) == []
