"""The fault proxy does what the fault tests rely on, against a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer
from dtq_devtools.testing.proxy import FaultProxy


@pytest.fixture
async def proxy(redis_server: RedisServer) -> AsyncIterator[FaultProxy]:
    p = FaultProxy(redis_server.port)
    await p.start()
    yield p
    await p.stop()


async def test_a_partition_holds_everything_and_the_heal_lets_it_cross(
    proxy: FaultProxy, redis_server: RedisServer
) -> None:
    through = connect(proxy.url)
    direct = connect(redis_server.url)
    try:
        await through.set("proxy:k", "before")
        proxy.partition()
        pending = asyncio.create_task(through.set("proxy:k", "during"))
        await asyncio.sleep(0.3)  # the fault's length, not a wait for something
        assert not pending.done()
        assert await direct.get("proxy:k") == "before"  # the write has not crossed
        proxy.heal()
        assert await asyncio.wait_for(pending, 5) is True
        assert await direct.get("proxy:k") == "during"
    finally:
        await through.aclose()
        await direct.aclose()


async def test_a_severed_connection_is_silent_and_a_new_one_works(proxy: FaultProxy) -> None:
    through = connect(proxy.url, socket_timeout=0.5)
    try:
        assert await through.ping()
        assert proxy.sever() == 1
        with pytest.raises(RedisTimeoutError):
            await through.ping()  # no FIN, no RST: only the timeout tells
        assert await through.ping()  # a new connection
        assert proxy.connections == 2
    finally:
        await through.aclose()


async def test_a_lost_reply_comes_after_the_command_ran(
    proxy: FaultProxy, redis_server: RedisServer
) -> None:
    through = connect(proxy.url)
    direct = connect(redis_server.url)
    try:
        proxy.lose_reply_to(b"proxy:lost")
        with pytest.raises(RedisConnectionError):
            await through.incr("proxy:lost")
        assert proxy.replies_lost == 1
        assert await direct.get("proxy:lost") == "1"  # it ran
        assert await through.incr("proxy:lost") == 2  # once only: the next one is answered
    finally:
        await through.aclose()
        await direct.aclose()


async def test_a_delay_holds_each_chunk_in_order(redis_server: RedisServer) -> None:
    slow = FaultProxy(redis_server.port, delay_s=0.05)
    await slow.start()
    through = connect(slow.url)
    try:
        loop = asyncio.get_running_loop()
        assert await through.ping()  # connected
        started = loop.time()
        replies = await asyncio.gather(*(through.echo(str(i)) for i in range(5)))
        assert replies == [str(i) for i in range(5)]
        assert loop.time() - started >= 0.1  # at least one round trip: 2 x 50 ms
    finally:
        await through.aclose()
        await slow.stop()
