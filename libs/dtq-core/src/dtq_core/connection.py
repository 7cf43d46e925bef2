"""Redis connections for every dtq process.

redis.asyncio packs each argument in pure Python (about 0.5 µs per argument); a batch of 500
submits carries 6,000 arguments, so commands are packed by hiredis in C instead.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, ConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from dtq_core.errors import RedisUnavailableError
from dtq_core.settings import Settings

StreamEntry = tuple[str, dict[str, str]]
"""An entry as redis-py returns it with ``decode_responses=True``."""
StreamReply = list[tuple[str, list[StreamEntry]]]
"""The reply of XREAD/XREADGROUP with ``decode_responses=True``."""

# Every command a dtq process sends is bounded by this; blocking reads use shorter BLOCKs.
SOCKET_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 2.0
BLOCKING_READ_MS = 2000


class HiredisPackConnection(Connection):
    """A connection whose commands are packed by hiredis (C) instead of Python, and whose
    writes are bounded by ``asyncio.timeout`` instead of ``asyncio.wait_for``.

    On Python 3.11 ``wait_for`` runs the write in a new task (a few µs per command) and can
    swallow a cancellation that arrives as the write completes (CPython gh-86296).
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str) and " " in head:
            args = (*head.split(), *args[1:])
        return [hiredis.pack_command(args)]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        timeout = self.socket_timeout
        if not timeout:
            await super().send_packed_command(command, check_health)
            return
        try:
            async with asyncio.timeout(timeout):
                # One command at a time uses a connection: the parent writes without its own
                # timer while the outer one bounds the write.
                self.socket_timeout = None
                try:
                    await super().send_packed_command(command, check_health)
                finally:
                    self.socket_timeout = timeout
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None


def connect(
    settings_or_url: Settings | str, *, client_name: str | None = None, **kwargs: Any
) -> aioredis.Redis:
    """An asyncio Redis client with dtq's defaults.

    Commands are not retried by the client: a state transition whose reply was lost must be
    retried by the caller, which knows whether that is safe (finish is fenced by its lease;
    submit is made safe by an idempotency key).
    """
    url = settings_or_url if isinstance(settings_or_url, str) else settings_or_url.redis_url
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": Retry(NoBackoff(), 0),
        "client_name": client_name,
    }
    options.update(kwargs)
    pool = ConnectionPool.from_url(url, connection_class=HiredisPackConnection, **options)
    # from_pool: the client owns the pool, so aclose() closes its connections too.
    return aioredis.Redis.from_pool(pool)


P = ParamSpec("P")
R = TypeVar("R")

REDIS_DOWN: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
"""What a Redis that does not answer raises (refused, reset, timed out)."""

RETRYABLE: tuple[type[Exception], ...] = (RedisError, RedisUnavailableError)
"""What a service's loop retries with backoff: Redis refused or did not answer, or holds no
function library the service may load (until ``dtq migrate`` runs)."""


def answering(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Turn a Redis that does not answer into :class:`RedisUnavailableError` (a 503)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except AuthenticationError:
            raise  # Redis answered: the credentials are wrong, which is not an outage.
        except TimeoutError:
            raise  # the caller's own deadline (Client.wait), not Redis's
        except REDIS_DOWN as exc:
            raise RedisUnavailableError(f"Redis did not answer: {exc}") from exc

    return wrapper
