"""Submits through the Python SDK against a real redis-server: ``Client.submit`` of one request
and of a batch, and the conveniences on top of it (``enqueue``, ``enqueue_many``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from dtq_core import (
    BatchRefusedError,
    Client,
    DtqError,
    IdempotencyConflictError,
    InvalidNameError,
    PayloadTooLargeError,
    QueueFullError,
    TaskHandle,
    TaskRegistry,
    TaskRequest,
    TaskStatus,
    ValidationError,
)
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.submitter import as_request


async def _keys(redis: aioredis.Redis) -> set[str]:
    return {k async for k in redis.scan_iter(count=1000)}


# -- enqueue ----------------------------------------------------------------------------------


async def test_enqueue_and_get(client: Client) -> None:
    handle = await client.enqueue(
        "emails.send",
        args=["a@b.c"],
        kwargs={"subject": "hi"},
        queue="emails",
        priority=7,
        metadata={"tenant": "t1"},
    )
    assert isinstance(handle, TaskHandle)
    assert handle.created
    assert handle.queue == "emails"
    assert handle.id.startswith("emails:")
    assert handle.submitted_status is TaskStatus.QUEUED
    record = await client.get(handle.id)
    assert record is not None
    assert (record.id, record.task, record.queue) == (handle.id, "emails.send", "emails")
    assert (record.status, record.priority, record.attempts) == (TaskStatus.QUEUED, 7, 0)
    assert record.args == ["a@b.c"]
    assert record.kwargs == {"subject": "hi"}
    assert record.metadata == {"tenant": "t1"}
    assert record.created_at.tzinfo is not None
    assert abs(record.created_at - datetime.now(UTC)) < timedelta(minutes=5)
    assert await handle.status() is TaskStatus.QUEUED
    assert (await handle.info()).id == handle.id
    assert "emails" in await client.redis.smembers(client.keys.queues)


async def test_enqueue_defaults(client: Client) -> None:
    handle = await client.enqueue("t")
    record = await handle.info()
    assert (record.queue, record.priority, record.args, record.kwargs) == ("default", 5, [], {})


async def test_enqueue_a_registered_task_uses_its_defaults(client: Client) -> None:
    registry = TaskRegistry()

    @registry.task(name="emails.send", queue="emails", max_attempts=5, timeout_s=30, priority=8)
    async def send(ctx: Any, to: str) -> None:
        return None

    task_def = registry.get("emails.send")
    assert task_def is not None
    handle = await client.enqueue(task_def, args=["a@b.c"])
    record = await handle.info()
    assert (record.queue, record.priority, record.max_attempts, record.timeout_s) == (
        "emails",
        8,
        5,
        30.0,
    )
    other = await client.enqueue(task_def, args=["x"], queue="other", priority=1, max_attempts=2)
    record = await other.info()
    assert (record.queue, record.priority, record.max_attempts) == ("other", 1, 2)


async def test_enqueue_delayed_and_eta(client: Client) -> None:
    delayed = await client.enqueue("t", delay_s=60)
    assert delayed.submitted_status is TaskStatus.SCHEDULED
    record = await delayed.info()
    assert record.scheduled_for is not None
    assert record.scheduled_for > datetime.now(UTC) + timedelta(seconds=50)
    past = await client.enqueue("t", eta=datetime.now(UTC) - timedelta(days=1))
    assert past.submitted_status is TaskStatus.QUEUED


async def test_enqueue_refuses_bad_input_and_writes_nothing(client: Client) -> None:
    before = await _keys(client.redis)
    bad: list[tuple[dict[str, Any], type[Exception]]] = [
        ({"queue": "a:b"}, InvalidNameError),
        ({"priority": 10}, ValidationError),
        ({"delay_s": -1}, ValidationError),
        ({"args": ["x" * 300_000]}, PayloadTooLargeError),
        ({"args": [object()]}, ValidationError),
        ({"idempotency_key": "k" * 257}, ValidationError),
        ({"max_attempts": 0}, ValidationError),
        ({"timeout_s": 3601}, ValidationError),
    ]
    for options, error in bad:
        with pytest.raises(error):
            await client.enqueue("t", **options)
    with pytest.raises(InvalidNameError):
        await client.enqueue("bad name")
    assert await _keys(client.redis) == before


async def test_enqueue_idempotent_replay_and_conflict(client: Client) -> None:
    first = await client.enqueue("t", args=[1], idempotency_key="order-1")
    replay = await client.enqueue("t", args=[1], idempotency_key="order-1")
    assert replay.id == first.id
    assert (first.created, replay.created) == (True, False)
    with pytest.raises(IdempotencyConflictError) as exc:
        await client.enqueue("t", args=[2], idempotency_key="order-1")
    assert first.id in str(exc.value)
    assert exc.value.code == "idempotency_conflict"


async def test_enqueue_into_a_full_queue(redis: aioredis.Redis, settings: Settings) -> None:
    client = Client(
        redis,
        load_settings(
            {}, redis_url=settings.redis.url, max_queue_depth=2, reject_unknown_queues=False
        ),
    )
    await client.enqueue("t")
    await client.enqueue("t", delay_s=30)
    with pytest.raises(QueueFullError) as exc:
        await client.enqueue("t")
    assert "DTQ_MAX_QUEUE_DEPTH=2" in str(exc.value)
    assert exc.value.detail["limit"] == 2


# -- enqueue_many ------------------------------------------------------------------------------


async def test_enqueue_many_mixed_queues_and_invalid_items(client: Client) -> None:
    results = await client.enqueue_many(
        [
            TaskRequest(task="a.x", queue="alpha", args=[1]),
            {"task": "b.y", "queue": "beta", "priority": 9},
            TaskRequest(task="a.x", queue="a:b"),  # invalid queue name
            {"task": "b.y", "queue": "beta", "priority": 10},  # invalid priority
            TaskRequest(task="a.x", queue="alpha", args=["x" * 300_000]),  # too large
            {"task": "c.z", "queue": "gamma", "delay_s": 30},
        ],
        return_exceptions=True,
    )
    assert len(results) == 6
    ok = [r for r in results if isinstance(r, TaskHandle)]
    assert [r.queue for r in ok] == ["alpha", "beta", "gamma"]
    assert [results.index(r) for r in ok] == [0, 1, 5]
    assert isinstance(results[2], InvalidNameError)
    assert isinstance(results[3], ValidationError)
    assert results[3].field == "priority"
    assert isinstance(results[4], PayloadTooLargeError)
    assert ok[2].submitted_status is TaskStatus.SCHEDULED
    for handle in ok:
        assert await client.get(handle.id) is not None
    # Nothing of the refused items was written: only the three valid queues exist.
    assert await client.redis.smembers(client.keys.queues) == {"alpha", "beta", "gamma"}
    for key in await _keys(client.redis):
        assert key == client.keys.queues or key.split("{")[1].split("}")[0] in {
            "alpha",
            "beta",
            "gamma",
        }


async def test_enqueue_many_reports_malformed_mappings_per_item(client: Client) -> None:
    results = await client.enqueue_many(
        [{"task": "ok.one"}, {"task": "t", "priority": "5"}, {"args": [1]}], return_exceptions=True
    )
    assert isinstance(results[0], TaskHandle)
    assert isinstance(results[1], ValidationError)
    assert isinstance(results[2], ValidationError)


async def test_enqueue_many_raises_when_any_task_is_refused(client: Client) -> None:
    """Nothing refused goes unseen: the error carries the handles of the tasks submitted and
    the refusals by index, and ``except*`` splits the refusals by kind."""
    requests = [{"task": "ok.one"}, {"task": "t", "priority": 99}, {"task": "ok.one"}]
    with pytest.raises(BatchRefusedError) as info:
        await client.enqueue_many(requests)
    error = info.value
    assert [type(h) for h in error.accepted] == [TaskHandle, TaskHandle]
    assert [(i, type(e)) for i, e in error.refused] == [(1, ValidationError)]
    assert "1 of 3 tasks were refused" in str(error)
    assert isinstance(error, DtqError)  # an `except DtqError` around SDK calls sees it
    for handle in error.accepted:
        assert await client.get(handle.id) is not None  # they were submitted
    caught = []
    try:
        await client.enqueue_many(requests)
    except* ValidationError as group:
        caught = list(group.exceptions)
    assert len(caught) == 1
    assert len(await client.enqueue_many([{"task": "ok.one"}] * 3)) == 3


async def test_enqueue_many_large_batch_and_duplicates(client: Client) -> None:
    reqs = [TaskRequest(task="t", args=[i]) for i in range(1200)]
    reqs += [TaskRequest(task="t", args=["same"], idempotency_key="k")] * 2
    results = await client.enqueue_many(reqs)
    handles = [r for r in results if isinstance(r, TaskHandle)]
    assert len(handles) == 1202
    assert len({h.id for h in handles}) == 1201
    assert (handles[-2].created, handles[-1].created) == (True, False)
    assert await client.redis.xlen(client.queue_keys("default").streams[5]) == 1201
    assert await client.enqueue_many([]) == []


# -- submit: the one path under every other ----------------------------------------------------


async def test_submit_one_request_returns_its_handle_and_raises_its_refusal(
    client: Client,
) -> None:
    handle = await client.submit(TaskRequest(task="t", queue="q", args=[1]))
    assert isinstance(handle, TaskHandle)
    assert (handle.queue, handle.created, handle.submitted_status) == ("q", True, TaskStatus.QUEUED)
    record = await handle.info()
    assert (record.task, record.args) == ("t", [1])
    with pytest.raises(InvalidNameError):
        await client.submit(TaskRequest(task="t", queue="a:b"))


async def test_submit_a_batch_answers_each_request_in_order(client: Client) -> None:
    results = await client.submit(
        [
            TaskRequest(task="t", queue="q"),
            {"task": "t", "queue": "r", "delay_s": 30},
            TaskRequest(task="t", queue="a:b"),
            {"task": "t", "priority": "5"},
        ]
    )
    assert [type(r) for r in results] == [TaskHandle, TaskHandle, InvalidNameError, ValidationError]
    first, second = results[0], results[1]
    assert isinstance(first, TaskHandle)
    assert isinstance(second, TaskHandle)
    assert (first.queue, second.queue) == ("q", "r")
    assert second.submitted_status is TaskStatus.SCHEDULED
    assert await client.submit([]) == []


async def test_submit_applies_a_definitions_defaults_unless_the_request_sets_them(
    client: Client,
) -> None:
    registry = TaskRegistry()

    @registry.task(name="emails.send", queue="emails", max_attempts=5, timeout_s=30)
    async def send(ctx: Any) -> None:
        return None

    definition = registry.get("emails.send")
    assert definition is not None
    one = await client.submit(TaskRequest(task="emails.send", queue="q"), defaults=definition)
    record = await one.info()
    assert (record.queue, record.max_attempts, record.timeout_s) == ("q", 5, 30.0)
    many = await client.submit(
        [
            TaskRequest(task="emails.send", queue="q"),
            TaskRequest(task="emails.send", queue="q", max_attempts=2, timeout_s=1),
        ],
        defaults=definition,
    )
    records = [await h.info() for h in many if isinstance(h, TaskHandle)]
    assert [(r.max_attempts, r.timeout_s) for r in records] == [(5, 30.0), (2, 1.0)]
    plain = await client.submit(TaskRequest(task="emails.send", queue="q"))
    # Left to the task's default, which the worker that claims it resolves.
    assert (await plain.info()).max_attempts is None


async def test_enqueue_and_submit_are_one_request(client: Client) -> None:
    """The same options through ``enqueue`` and as a TaskRequest through ``submit`` make the
    same request: the second is an idempotent replay of the first."""
    first = await client.enqueue("t", args=[1], queue="q", priority=7, idempotency_key="k")
    again = await client.submit(
        TaskRequest(task="t", args=[1], queue="q", priority=7, idempotency_key="k")
    )
    batch = await client.submit(
        [TaskRequest(task="t", args=[1], queue="q", priority=7, idempotency_key="k")]
    )
    assert (again.id, again.created) == (first.id, False)
    assert isinstance(batch[0], TaskHandle)
    assert (batch[0].id, batch[0].created) == (first.id, False)


def test_as_request_keeps_requests_and_converts_mappings() -> None:
    request = TaskRequest(task="t")
    assert as_request(request) is request
    assert as_request({"task": "t", "queue": "q", "priority": 3}) == TaskRequest(
        task="t", queue="q", priority=3
    )
    for bad in ({"task": "t", "priority": "5"}, {"args": [1]}, {"task": 5}):
        refusal = as_request(bad)
        assert isinstance(refusal, ValidationError)
        assert str(refusal).startswith("invalid task request: ")
