"""The bounded connection pool against a real redis-server (paused to hold connections)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
import uvloop
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError

from dtq_core.infra.connection import BoundedPool, connect
from dtq_core.infra.pool import HiredisPackConnection
from dtq_core.infra.settings import Settings, load_settings
from dtq_devtools.testing import RedisServer


@pytest.mark.standalone_only  # pauses the one server; a cluster node's pool does not wait
async def test_a_command_waits_for_a_released_connection(
    redis: aioredis.Redis, settings: Settings
) -> None:
    """Five commands on a two-connection pool while Redis pauses for half a second: those
    that find both connections busy wait for one instead of failing."""
    one = connect(load_settings({}, redis_url=settings.redis.url, redis_max_connections=2))
    try:
        pool = one.connection_pool
        assert isinstance(pool, BoundedPool)
        await one.ping()
        await redis.execute_command("CLIENT", "PAUSE", "500", "ALL")
        replies = await asyncio.gather(*(one.incr("n") for _ in range(5)))
        assert sorted(replies) == [1, 2, 3, 4, 5]
        assert pool.checked_out == 0
    finally:
        await one.aclose()


@pytest.mark.standalone_only  # pauses the one server
async def test_a_full_pool_names_its_cap(redis: aioredis.Redis, settings: Settings) -> None:
    one = connect(settings, max_connections=1, timeout=0.2)
    try:
        await one.ping()
        await redis.execute_command("CLIENT", "PAUSE", "1500", "ALL")
        replies = await asyncio.gather(one.ping(), one.ping(), return_exceptions=True)
        refused = [r for r in replies if isinstance(r, MaxConnectionsError)]
        assert len(refused) == 1, replies
        assert "all 1 Redis connections" in str(refused[0])
        answered = [r for r in replies if not isinstance(r, BaseException)]
        assert answered == [True], replies  # the other ping waited for the connection and ran
    finally:
        await redis.execute_command("CLIENT", "UNPAUSE")
        await one.aclose()


@pytest.mark.parametrize("socket_timeout", [None, 2.0])
def test_a_write_on_a_connection_the_server_closed_is_a_connection_error_on_uvloop(
    redis_server: RedisServer, socket_timeout: float | None
) -> None:
    """uvloop (every service's loop) refuses the write with RuntimeError, which redis-py
    passed on as it was: a scheduler leader died of it when the master under its connection
    was killed (tests/chaos/test_failover_leader.py on a cluster)."""

    async def write_after_close() -> Exception | None:
        conn = HiredisPackConnection(port=redis_server.port, socket_timeout=socket_timeout)
        await conn.connect()
        assert conn._writer is not None
        conn._writer.transport.abort()  # as a killed server's reset does
        await asyncio.sleep(0.05)  # the loop closes the transport
        try:
            await conn.send_command("PING")
        except Exception as exc:  # returned, to be checked below
            return exc
        finally:
            await conn.disconnect()
        return None

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        raised = runner.run(write_after_close())
    assert isinstance(raised, RedisConnectionError), repr(raised)
