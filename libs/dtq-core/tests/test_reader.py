"""Looking tasks up and waiting for their outcomes (``dtq_core.reader``) against a real
redis-server: records by id, waits woken by the event stream, and the one reader of event
streams behind every wait of a client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from dtq_core import Client, RedisUnavailableError, TaskNotFoundError, TaskStatus
from dtq_core.messages import TaskError
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.lifecycle import claim, finish
from dtq_devtools.testing.servers import clients, kill_client

UNKNOWN_ID = "q:" + "0" * 32
JUNK_IDS = ["", "junk", "dtq:{q}:p5", "*", "q:" + "0" * 31, "a:b:" + "0" * 32, "{q}:" + "0" * 32]


# -- get ---------------------------------------------------------------------------------------


async def test_get_unknown_or_junk_id_is_none(client: Client) -> None:
    assert await client.get(UNKNOWN_ID) is None
    for junk in JUNK_IDS:
        assert await client.get(junk) is None


# -- wait --------------------------------------------------------------------------------------


async def _blocked_readers(redis: aioredis.Redis) -> int:
    return sum(
        1 for c in await clients(redis) if c.get("cmd") == "xread" and "b" in c.get("flags", "")
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
        (c,) = await claim(client, queue)
        assert await finish(client, queue, [c], outcome, payload=payload) != ["stale"]

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


async def _reader(client: Client, *, other_than: int | None = None) -> dict[str, Any] | None:
    for c in await clients(client.redis):
        found = c.get("name") == "dtq-waits" and c.get("cmd") == "xread"
        if found and int(c["id"]) != other_than:
            return c
    return None


async def _reader_id(client: Client, *, other_than: int | None = None) -> int | None:
    reader = await _reader(client, other_than=other_than)
    return None if reader is None else int(reader["id"])


async def test_a_wait_whose_reader_loses_its_connection_reads_again(client: Client) -> None:
    """The shared reader's connection is killed: the reader reads again on a new connection,
    and the wait returns when its task ends (a dropped connection is not an outage)."""
    handle = await client.enqueue("t", queue="q")
    pending = asyncio.create_task(handle.result(timeout=60))
    reader = await wait_until(lambda: _reader(client), message="the reader blocks")
    await kill_client(client.redis, reader)
    await wait_until(
        lambda: _reader_id(client, other_than=int(reader["id"])), message="a new connection reads"
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
    idle = [c for c in await clients(client.redis) if c.get("name") == "dtq-waits"]
    assert idle, "the reader keeps its connection"
    for c in idle:
        await kill_client(client.redis, c)
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
