"""The bounded connection pool against a real redis-server (paused to hold connections)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import MaxConnectionsError

from dtq_core.infra.connection import BoundedPool, connect
from dtq_core.infra.settings import Settings, load_settings


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
