"""The Python SDK against a real redis-server: submit, inspect, wait, cancel, retry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis as syncredis
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from dtq_core import (
    Client,
    IdempotencyConflictError,
    InvalidNameError,
    InvalidStateError,
    PayloadTooLargeError,
    QueueFullError,
    RedisUnavailableError,
    SyncClient,
    SyncTaskHandle,
    TaskHandle,
    TaskNotFoundError,
    TaskRegistry,
    TaskRequest,
    TaskStatus,
    ValidationError,
)
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import TaskError
from dtq_core.protocol.scripts import Claimed, Finish, Held, task_defaults
from dtq_core.protocol.submit import new_rands
from dtq_devtools.testing import RedisServer, free_port, wait_until

UNKNOWN_ID = "q:" + "0" * 32
JUNK_IDS = ["", "junk", "dtq:{q}:p5", "*", "q:" + "0" * 31, "a:b:" + "0" * 32, "{q}:" + "0" * 32]


async def _claim(client: Client, queue: str, consumer: str = "w1") -> list[Claimed]:
    s = client.settings
    _, got = await client.scripts.claim(
        client.queue_keys(queue),
        consumer=consumer,
        count=100,
        events_maxlen=s.queues.events_maxlen,
        retention_ms=s.tasks.retention_s * 1000,
        defaults=task_defaults(s.retries.max_attempts, s.tasks.timeout_ms),
    )
    return got


async def _finish(
    client: Client, queue: str, c: Claimed, outcome: str, payload: str = ""
) -> list[str]:
    s = client.settings
    return await client.scripts.finish(
        client.queue_keys(queue),
        [Finish(Held(c.rand, c.priority, c.entry_id, c.lease), outcome, payload, "")],
        events_maxlen=s.queues.events_maxlen,
        result_retention_ms=s.tasks.result_retention_s * 1000,
        retention_ms=s.tasks.retention_s * 1000,
        dlq_enabled=s.queues.dlq_enabled,
        dlq_maxlen=s.queues.dlq_maxlen,
    )


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


async def test_handle_of_a_known_id(client: Client) -> None:
    handle = await client.enqueue("t", queue="emails")
    other = client.handle(handle.id)
    assert (other.id, other.queue) == (handle.id, "emails")
    assert await other.status() is TaskStatus.QUEUED
    with pytest.raises(TaskNotFoundError):
        client.handle("junk")


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
        ]
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
        [{"task": "ok.one"}, {"task": "t", "priority": "5"}, {"args": [1]}]
    )
    assert isinstance(results[0], TaskHandle)
    assert isinstance(results[1], ValidationError)
    assert isinstance(results[2], ValidationError)


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


# -- get ---------------------------------------------------------------------------------------


async def test_get_unknown_or_junk_id_is_none(client: Client) -> None:
    assert await client.get(UNKNOWN_ID) is None
    for junk in JUNK_IDS:
        assert await client.get(junk) is None


# -- wait --------------------------------------------------------------------------------------


async def _blocked_readers(redis: aioredis.Redis) -> int:
    return sum(
        1
        for c in await redis.client_list()
        if c.get("cmd") == "xread" and "b" in c.get("flags", "")
    )


async def _finish_in_background(
    client: Client, queue: str, outcome: str, payload: str
) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        await wait_until(
            lambda: _blocked_readers(client.redis),
            timeout=10,
            message="waiter blocked on the event stream",
        )
        (c,) = await _claim(client, queue)
        assert await _finish(client, queue, c, outcome, payload) != ["stale"]

    return run


async def test_wait_returns_when_another_coroutine_finishes_the_task(client: Client) -> None:
    handle = await client.enqueue("t", queue="q")
    finisher = asyncio.create_task((await _finish_in_background(client, "q", "ok", '{"n":1}'))())
    started = time.monotonic()
    outcome = await handle.result(timeout=10)
    await finisher
    assert time.monotonic() - started < 5  # woken by the event, not by the timeout
    assert outcome.ok
    assert (outcome.id, outcome.status, outcome.attempts) == (handle.id, TaskStatus.SUCCEEDED, 1)
    assert outcome.result == {"n": 1}
    assert outcome.error is None


async def test_wait_reports_the_last_error_of_a_dead_task(client: Client) -> None:
    handle = await client.enqueue("t", queue="q")
    payload = '{"attempt":1,"type":"ValueError","message":"boom"}'
    finisher = asyncio.create_task((await _finish_in_background(client, "q", "dead", payload))())
    outcome = await client.wait(handle.id, timeout=10)
    await finisher
    assert outcome.status is TaskStatus.DEAD
    assert not outcome.ok
    assert outcome.error == TaskError(attempt=1, type="ValueError", message="boom")


async def test_wait_of_a_finished_task_returns_at_once(client: Client) -> None:
    handle = await client.enqueue("t")
    assert await handle.cancel() is TaskStatus.CANCELLED
    outcome = await client.wait(handle.id, timeout=0.01)
    assert outcome.status is TaskStatus.CANCELLED


async def test_wait_times_out(client: Client) -> None:
    handle = await client.enqueue("t")
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await handle.result(timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 3
    assert await handle.status() is TaskStatus.QUEUED


async def test_wait_for_an_unknown_task(client: Client) -> None:
    with pytest.raises(TaskNotFoundError):
        await client.wait(UNKNOWN_ID, timeout=1)
    with pytest.raises(TaskNotFoundError):
        await client.wait("junk", timeout=1)


# -- cancel and retry --------------------------------------------------------------------------


async def test_cancel(client: Client) -> None:
    queued = await client.enqueue("t", queue="q")
    assert await client.cancel(queued.id) is TaskStatus.CANCELLED
    assert await queued.status() is TaskStatus.CANCELLED
    with pytest.raises(InvalidStateError) as exc:
        await client.cancel(queued.id)
    assert exc.value.code == "invalid_state"
    with pytest.raises(TaskNotFoundError):
        await client.cancel(UNKNOWN_ID)
    for junk in JUNK_IDS:
        with pytest.raises(TaskNotFoundError):
            await client.cancel(junk)


async def test_cancel_a_running_task_is_a_request(client: Client) -> None:
    handle = await client.enqueue("t", queue="q")
    (c,) = await _claim(client, "q")
    assert await handle.cancel() is TaskStatus.RUNNING
    assert (await handle.info()).cancel_requested
    assert await _finish(client, "q", c, "cancel") == ["cancelled"]
    assert (await handle.result(timeout=1)).status is TaskStatus.CANCELLED


async def test_retry_a_dead_task(client: Client) -> None:
    handle = await client.enqueue("t", queue="q")
    (c,) = await _claim(client, "q")
    await _finish(client, "q", c, "dead", '{"attempt":1,"type":"E","message":"m"}')
    assert await client.retry(handle.id) is TaskStatus.QUEUED
    record = await handle.info()
    assert (record.status, record.attempts, len(record.errors)) == (TaskStatus.QUEUED, 0, 1)
    with pytest.raises(TaskNotFoundError):
        await client.retry(UNKNOWN_ID)
    with pytest.raises(TaskNotFoundError):
        await client.retry("junk")


async def test_retry_refuses_a_finished_task(client: Client) -> None:
    handle = await client.enqueue("t", queue="q")
    (c,) = await _claim(client, "q")
    await _finish(client, "q", c, "ok", "1")
    with pytest.raises(InvalidStateError) as exc:
        await client.retry(handle.id)
    assert "succeeded" in str(exc.value)


async def test_retry_refuses_a_queued_task(client: Client) -> None:
    handle = await client.enqueue("t", queue="q")
    with pytest.raises(InvalidStateError):
        await client.retry(handle.id)


# -- lifecycle of the client -------------------------------------------------------------------


async def test_aclose_closes_the_connections(redis: aioredis.Redis, settings: Settings) -> None:
    name = "sdk-" + new_rands(1)[0][:12]
    client = Client.from_settings(settings, client_name=name)
    async with client:
        await client.enqueue("t")

    async def ours() -> list[dict[str, Any]]:
        return [c for c in await redis.client_list() if c.get("name") == name]

    await wait_until(lambda: _none(ours), timeout=5, message="connections closed")
    assert await ours() == []


async def _none(fn: Callable[[], Awaitable[list[Any]]]) -> bool:
    return not await fn()


# -- Redis unavailable --------------------------------------------------------------------------


@pytest.fixture
async def down() -> AsyncIterator[Client]:
    client = Client.from_url(f"redis://127.0.0.1:{free_port()}/0")
    yield client
    await client.aclose()


async def test_enqueue_with_redis_down(down: Client) -> None:
    with pytest.raises(RedisUnavailableError) as exc:
        await down.enqueue("t")
    assert exc.value.code == "redis_unavailable"
    with pytest.raises(RedisUnavailableError):
        await down.enqueue_many([{"task": "t"}])


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.get(UNKNOWN_ID), id="get"),
        pytest.param(lambda c: c.wait(UNKNOWN_ID, timeout=1), id="wait"),
        pytest.param(lambda c: c.cancel(UNKNOWN_ID), id="cancel"),
        pytest.param(lambda c: c.retry(UNKNOWN_ID), id="retry"),
    ],
)
async def test_every_call_with_redis_down(
    down: Client, call: Callable[[Client], Awaitable[Any]]
) -> None:
    with pytest.raises(RedisUnavailableError):
        await call(down)


# -- SyncClient ---------------------------------------------------------------------------------


def test_sync_client_from_plain_code(redis_url: str) -> None:
    # A clean database, as the async `redis` fixture gives (no registered task names).
    with syncredis.Redis.from_url(redis_url) as admin:
        admin.flushall()
    queue = "sync-" + new_rands(1)[0][:8]
    with SyncClient(redis_url, max_queue_depth=100, reject_unknown_queues=False) as client:
        handle = client.enqueue("t", args=[1], queue=queue, priority=8)
        assert isinstance(handle, SyncTaskHandle)
        assert handle.queue == queue
        assert handle.created
        assert handle.status() is TaskStatus.QUEUED
        record = client.get(handle.id)
        assert record is not None
        assert (record.args, record.priority) == ([1], 8)
        assert handle.info().id == handle.id

        with pytest.raises(TimeoutError):
            handle.result(timeout=0.1)
        assert handle.cancel() is TaskStatus.CANCELLED
        assert client.wait(handle.id, timeout=1).status is TaskStatus.CANCELLED
        with pytest.raises(InvalidStateError):
            client.cancel(handle.id)
        with pytest.raises(TaskNotFoundError):
            client.retry(f"{queue}:" + "0" * 32)

        many = client.enqueue_many(
            [{"task": "t", "queue": queue}, {"task": "t", "queue": "bad:name"}]
        )
        assert isinstance(many[0], SyncTaskHandle)
        assert isinstance(many[1], InvalidNameError)
        assert client.get("junk") is None
    client.close()  # closing twice is harmless


async def test_waits_hold_no_pooled_connection(redis_url: str, redis: Any) -> None:
    """Many ``handle.result()`` at once on a client whose pool has two connections: they all
    return when the task ends (each blocking read would have needed a connection)."""
    async with Client.from_url(
        redis_url, redis_max_connections=2, reject_unknown_queues=False
    ) as client:
        handle = await client.enqueue("t", queue="q")
        pending = [asyncio.create_task(handle.result(timeout=30)) for _ in range(50)]
        await wait_until(lambda: client.waiter.waiting == 50, message="waits registered")
        await client.cancel(handle.id)
        outcomes = await asyncio.gather(*pending)
        assert {o.status.value for o in outcomes} == {"cancelled"}
        assert client.waiter.waiting == 0


async def _reader_id(client: Client, *, other_than: int | None = None) -> int | None:
    for c in await client.redis.client_list():
        found = c.get("name") == "dtq-waits" and c.get("cmd") == "xread"
        if found and int(c["id"]) != other_than:
            return int(c["id"])
    return None


async def test_a_wait_whose_reader_loses_its_connection_reads_again(client: Client) -> None:
    """The shared reader's connection is killed: the reader reads again on a new connection,
    and the wait returns when its task ends (a dropped connection is not an outage)."""
    handle = await client.enqueue("t", queue="q")
    pending = asyncio.create_task(handle.result(timeout=60))
    reader = await wait_until(lambda: _reader_id(client), message="the reader blocks")
    await client.redis.execute_command("CLIENT", "KILL", "ID", str(reader))
    await wait_until(
        lambda: _reader_id(client, other_than=reader), message="a new connection reads"
    )
    await client.cancel(handle.id)
    assert (await pending).status is TaskStatus.CANCELLED


async def test_waits_fail_at_once_when_redis_is_down(tmp_path: Path) -> None:
    """Redis stops while a wait is held: the wait gets RedisUnavailableError (after one read
    on a new connection), not a hang until its timeout."""
    server = RedisServer(tmp_path, appendonly=False)
    server.start()
    try:
        async with Client.from_url(server.url, reject_unknown_queues=False) as client:
            handle = await client.enqueue("t", queue="q")
            pending = asyncio.create_task(handle.result(timeout=60))
            await wait_until(lambda: client.waiter.waiting == 1, message="the wait registered")
            server.stop()
            with pytest.raises(RedisUnavailableError):
                await asyncio.wait_for(pending, timeout=30)
    finally:
        server.stop()


async def test_one_reader_serves_waits_on_several_queues(client: Client) -> None:
    """Each wait on a queue the reader does not read yet restarts its blocking read with that
    queue's stream; every wait returns when its own task ends."""
    handles = [await client.enqueue("t", queue=f"q{i}") for i in range(5)]
    pending = []
    for n, handle in enumerate(handles, start=1):
        pending.append(asyncio.create_task(handle.result(timeout=30)))
        await wait_until(lambda n=n: client.waiter.waiting == n, message=f"{n} waits")
    for handle, task in zip(reversed(handles), reversed(pending), strict=True):
        await client.cancel(handle.id)
        assert (await task).id == handle.id
    assert client.waiter.waiting == 0


async def test_a_wait_after_the_idle_readers_connection_died_is_served(client: Client) -> None:
    """The reader keeps its connection when the last waiter leaves; a Redis restart (or a
    kill) closes it meanwhile. The next wait reconnects instead of failing with a 503."""
    first = await client.enqueue("t", queue="q")
    pending = asyncio.create_task(first.result(timeout=30))
    await wait_until(lambda: _reader_id(client), message="the reader blocks")
    await client.cancel(first.id)
    await pending
    await wait_until(lambda: client.waiter.waiting == 0, message="the waiter left")
    idle = [c for c in await client.redis.client_list() if c.get("name") == "dtq-waits"]
    assert idle, "the reader keeps its connection"
    for c in idle:
        await client.redis.execute_command("CLIENT", "KILL", "ID", str(c["id"]))
    second = await client.enqueue("t", queue="q")
    again = asyncio.create_task(second.result(timeout=30))
    await wait_until(lambda: _reader_id(client), message="a reader blocks again")
    await client.cancel(second.id)
    assert (await again).status is TaskStatus.CANCELLED


async def test_a_wait_after_redis_restarted_is_served(tmp_path: Path) -> None:
    """Redis restarts between two waits: the reader's idle connection is dead, and the next
    wait reads on a new one instead of failing with RedisUnavailableError."""
    server = RedisServer(tmp_path, appendonly=False)
    server.start()
    try:
        async with Client.from_url(server.url, reject_unknown_queues=False) as client:
            first = await client.enqueue("t", queue="q")
            pending = asyncio.create_task(first.result(timeout=30))
            await wait_until(lambda: client.waiter.waiting == 1, message="the wait registered")
            await client.cancel(first.id)
            await pending
            # The reader ends idle, its connection open: the restart leaves that one dead.
            await wait_until(lambda: not client.waiter.reading, message="the reader ended")
            server.stop()
            server.start()
            await wait_until(_answers(client), message="Redis answers again")
            second = await client.enqueue("t", queue="q")
            again = asyncio.create_task(second.result(timeout=30))
            await wait_until(lambda: client.waiter.waiting == 1, message="the wait registered")
            await client.cancel(second.id)
            assert (await again).status is TaskStatus.CANCELLED
    finally:
        server.stop()


def _answers(client: Client) -> Callable[[], Awaitable[bool]]:
    async def ping() -> bool:
        try:
            return bool(await client.redis.ping())
        except RedisError:
            return False

    return ping
