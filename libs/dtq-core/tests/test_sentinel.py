"""A client of the master a real Sentinel set names, when the master moves (``SENTINEL
FAILOVER``: the old master stays up as a replica): the pool drops its connections to the old
master and the next command goes to the new one (no loop of errors, no restart)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from dtq_core.client import Client
from dtq_core.infra.connection import connect
from dtq_core.infra.sentinel import BoundedSentinelPool
from dtq_core.infra.settings import load_settings
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.plugin import FAST
from dtq_devtools.testing.topologies import SENTINEL_MASTER, SentinelSet

pytestmark = pytest.mark.slow  # a Sentinel set of its own, failed over by each test


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    made = SentinelSet(Path(tmp_path_factory.mktemp("sentinel-moves")))
    made.start()
    yield made
    made.stop()


@pytest.fixture
async def sdk(sentinels: SentinelSet) -> AsyncIterator[Client]:
    settings = load_settings({}, redis_url=sentinels.url, **FAST)
    async with Client(connect(settings), settings, owns_redis=True) as client:
        await client.redis.flushall()
        yield client


async def fail_over(sentinels: SentinelSet) -> int:
    """Move the master to the replica (``SENTINEL FAILOVER``: the old one stays up and
    becomes a replica); returns the new master's port."""
    old = sentinels.master_port()
    with sentinels.sentinel() as s:
        s.execute_command("SENTINEL", "FAILOVER", SENTINEL_MASTER)

    def demoted() -> bool:
        return sentinels.master_port() != old

    await wait_until(demoted, timeout=30, message="the sentinels named a new master")

    async def old_is_replica() -> bool:
        probe = aioredis.Redis(port=old, decode_responses=True)
        try:
            return (await probe.info("replication"))["role"] == "slave"
        finally:
            await probe.aclose()

    await wait_until(old_is_replica, timeout=30, message="the old master became a replica")
    sentinels.wait_ready()
    return sentinels.master_port()


async def test_the_pool_follows_the_new_master_after_one_refusal(
    sdk: Client, sentinels: SentinelSet
) -> None:
    redis = sdk.redis
    assert isinstance(redis.connection_pool, BoundedSentinelPool)
    # Several pooled connections to the master, idle now.
    await asyncio.gather(*(redis.blpop([f"warm{i}"], timeout=0.2) for i in range(6)))
    before = await sdk.enqueue("t.x", queue="moves")
    # On the replica before the move (SENTINEL FAILOVER does not wait for it: an
    # unreplicated write is lost with the old master's role).
    assert await redis.execute_command("WAIT", 1, 5000) == 1
    new_port = await fail_over(sentinels)

    refusals = 0
    for i in range(10):
        try:
            await redis.set(f"after:{i}", "1")
        except RedisConnectionError:
            refusals += 1
    assert refusals <= 1  # at most the command that found the old master out
    probe = aioredis.Redis(port=new_port, decode_responses=True)
    try:
        assert await probe.exists(*(f"after:{i}" for i in range(1, 10))) == 9
    finally:
        await probe.aclose()
    # The SDK's transitions run on the new master; the task from before the move is there.
    await sdk.enqueue("t.x", queue="moves")
    assert await sdk.get(before.id) is not None


async def test_a_burst_in_flight_at_the_move_is_refused_at_most_once_per_call(
    sdk: Client, sentinels: SentinelSet
) -> None:
    redis = sdk.redis
    await asyncio.gather(*(redis.blpop([f"warm{i}"], timeout=0.2) for i in range(8)))
    await fail_over(sentinels)
    first = await asyncio.gather(*(redis.incr("burst") for _ in range(8)), return_exceptions=True)
    assert all(isinstance(r, (int, RedisConnectionError)) for r in first), first
    second = await asyncio.gather(*(redis.incr("burst") for _ in range(8)))
    assert len(second) == 8  # every pooled connection now talks to the new master


async def test_connections_busy_across_the_move_are_dropped_with_the_first_refusal(
    sdk: Client, sentinels: SentinelSet
) -> None:
    """Blocking reads in flight during the failover end (the sentinels close the clients of
    both nodes, ``CLIENT KILL TYPE normal``) instead of hanging, and their connections, back
    in the pool, do not send later commands to the old master."""
    redis = sdk.redis
    reads = [asyncio.create_task(redis.blpop([f"held{i}"], timeout=4)) for i in range(6)]
    await wait_until(lambda: redis.connection_pool.checked_out == 6, message="reads in flight")
    new_port = await fail_over(sentinels)
    await asyncio.gather(*reads, return_exceptions=True)  # unblocked by the role change
    refusals = 0
    for i in range(10):
        try:
            await redis.set(f"later:{i}", "1")
        except RedisConnectionError:
            refusals += 1
    assert refusals <= 1
    probe = aioredis.Redis(port=new_port)
    try:
        assert await probe.exists(*(f"later:{i}" for i in range(10))) == 10 - refusals
    finally:
        await probe.aclose()


async def test_sentinels_with_a_password_of_their_own(tmp_path: Path) -> None:
    """``?sentinel_password=`` reaches the sentinels (the data nodes want none here); without
    it the client's first command fails with the sentinels' own refusal, not a hang."""
    guarded = SentinelSet(tmp_path, sentinel_password="s3ntinel")  # noqa: S106 - a test value
    guarded.start()
    try:
        settings = load_settings({}, redis_url=guarded.url, **FAST)
        async with Client(connect(settings), settings, owns_redis=True) as client:
            assert (await client.enqueue("t.x", queue="guarded")).created
        bare = connect(guarded.url.partition("?")[0])
        try:
            with pytest.raises(RedisError) as refused:
                await bare.ping()
            message = str(refused.value)
            assert "AuthenticationError" in message
            assert f"127.0.0.1:{guarded.sentinel_ports[0]}" in message
            assert "?sentinel_password=" in message
        finally:
            await bare.aclose()
    finally:
        guarded.stop()
