"""The Python SDK's client against a real redis-server: handles of known ids, cancel and
retry, the client's lifecycle, and every call while Redis is down. Submits are in
test_client_submit.py, lookups and waits in test_reader.py, SyncClient in test_sync_client.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from dtq_core import (
    Client,
    InvalidStateError,
    RedisUnavailableError,
    SyncClient,
    TaskNotFoundError,
    TaskStatus,
)
from dtq_core.errors import SettingsError
from dtq_core.infra.settings import Settings
from dtq_core.protocol.submit import new_rands
from dtq_devtools.testing import free_port, wait_until
from dtq_devtools.testing.lifecycle import claim, finish

UNKNOWN_ID = "q:" + "0" * 32
JUNK_IDS = ["", "junk", "dtq:{q}:p5", "*", "q:" + "0" * 31, "a:b:" + "0" * 32, "{q}:" + "0" * 32]


async def test_handle_of_a_known_id(client: Client) -> None:
    handle = await client.enqueue("t", queue="emails")
    other = client.handle(handle.id)
    assert (other.id, other.queue) == (handle.id, "emails")
    assert await other.status() is TaskStatus.QUEUED
    with pytest.raises(TaskNotFoundError):
        client.handle("junk")


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
    (c,) = await claim(client, "q")
    assert await handle.cancel() is TaskStatus.RUNNING
    assert (await handle.info()).cancel_requested
    assert await finish(client, "q", [c], "cancel") == ["cancelled"]
    assert (await handle.result(timeout=1)).status is TaskStatus.CANCELLED


async def test_retry_a_dead_task(client: Client) -> None:
    handle = await client.enqueue("t", queue="q")
    (c,) = await claim(client, "q")
    await finish(client, "q", [c], "dead", payload='{"attempt":1,"type":"E","message":"m"}')
    assert await client.retry(handle.id) is TaskStatus.QUEUED
    record = await handle.info()
    assert (record.status, record.attempts, len(record.errors)) == (TaskStatus.QUEUED, 0, 1)
    with pytest.raises(TaskNotFoundError):
        await client.retry(UNKNOWN_ID)
    with pytest.raises(TaskNotFoundError):
        await client.retry("junk")


async def test_retry_refuses_a_finished_task(client: Client) -> None:
    handle = await client.enqueue("t", queue="q")
    (c,) = await claim(client, "q")
    await finish(client, "q", [c], "ok", payload="1")
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


async def test_from_env_reads_the_dtq_variables_and_keywords_win(redis_url: str) -> None:
    env = {
        "DTQ_REDIS_URL": redis_url,
        "DTQ_NAMESPACE": "fromenv",
        "DTQ_REJECT_UNKNOWN_QUEUES": "false",
        "HOME": "/ignored",  # not a dtq variable: left alone
    }
    async with Client.from_env(env) as client:
        assert client.settings.namespace == "fromenv"
        handle = await client.enqueue("t", queue="envq")
        assert await client.redis.exists(f"fromenv:{{envq}}:t:{handle.id.split(':')[1]}")
    async with Client.from_env(env, namespace="kw") as client:
        assert client.settings.namespace == "kw"
    # from_url reads no variable, whatever the environment holds.
    async with Client.from_url(redis_url) as client:
        assert client.settings.namespace == "dtq"
    with pytest.raises(SettingsError, match="DTQ_NAMESPCE is not a dtq setting"):
        Client.from_env({**env, "DTQ_NAMESPCE": "typo"})


def test_sync_from_env_reads_the_process_environment(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DTQ_REDIS_URL", redis_url)
    monkeypatch.setenv("DTQ_NAMESPACE", "syncenv")
    with SyncClient.from_env(reject_unknown_queues=False) as client:
        handle = client.enqueue("t", queue="envq")
        assert handle.id.startswith("envq:")
        assert handle.status() is TaskStatus.QUEUED
