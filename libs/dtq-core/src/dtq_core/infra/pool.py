"""The connections and the pool of every dtq client.

redis.asyncio packs each argument in pure Python (about 0.5 µs per argument); a batch of 500
submits carries 6,000 arguments, so commands are packed by hiredis in C instead.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any

import hiredis
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.exceptions import TimeoutError as RedisTimeoutError

POOL_WAIT_S = 2.0
"""How long a command waits for a free connection of a full pool before it is refused."""

UNTRUSTED_HINT = (
    "; the server's certificate is not signed by a CA this process trusts: name the CA's "
    "file in DTQ_REDIS_URL as ?ssl_ca_certs=/path/ca.pem (docs/scaling.md, TLS)"
)
PLAIN_TO_TLS_HINT = (
    " on a new connection's first command: a Redis that listens on TLS only closes a plain "
    "TCP connection so; if it does, use the rediss scheme (docs/scaling.md, TLS)"
)


class HiredisPacking(AbstractConnection):
    """Commands packed by hiredis (C) instead of Python, and writes bounded by
    ``asyncio.timeout`` instead of ``asyncio.wait_for``.

    On Python 3.11 ``wait_for`` runs the write in a new task (a few µs per command) and can
    swallow a cancellation that arrives as the write completes (CPython gh-86296).

    A connection refused over TLS says why: a certificate no trusted CA signed, or a plain
    connection closed by a server that speaks TLS only (redis-py reports only "certificate
    verify failed" and "Connection reset by peer").
    """

    def _error_message(self, exception: BaseException) -> str:
        message = super()._error_message(exception)
        if isinstance(exception, ssl.SSLCertVerificationError):
            return message + UNTRUSTED_HINT
        return message

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        try:
            await super().on_connect_check_health(check_health)
        except RedisConnectionError as exc:
            # Only a closed or reset socket: its subclasses (AuthenticationError, a refused
            # password) are answers from a Redis that does speak this connection's protocol.
            if type(exc) is not RedisConnectionError or isinstance(self, SSLConnection):
                raise
            raise RedisConnectionError(f"{exc}{PLAIN_TO_TLS_HINT}") from exc

    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str) and " " in head:
            args = (*head.split(), *args[1:])
        return [hiredis.pack_command(args)]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        writer = self._writer
        try:
            await self._send_bounded(command, check_health)
        except RuntimeError as exc:
            # uvloop refuses a write on a transport the server closed (a master killed under
            # the connection) with RuntimeError ("the handler is closed") where asyncio's
            # loop raises an OSError; redis-py turns only the latter into ConnectionError
            # (it has disconnected either way). Left as it is, it is no Redis error: the
            # cluster client does not reread its map and a service's loop ends the process.
            if writer is None or writer.transport.is_closing():
                raise RedisConnectionError(f"Error while writing to socket. {exc}") from exc
            raise

    async def _send_bounded(self, command: Any, check_health: bool) -> None:
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


class HiredisPackConnection(HiredisPacking, Connection):
    """A TCP connection with :class:`HiredisPacking`."""


class HiredisSSLConnection(HiredisPacking, SSLConnection):
    """A TLS connection with :class:`HiredisPacking`."""


class HiredisUnixConnection(HiredisPacking, UnixDomainSocketConnection):
    """A Unix-socket connection with :class:`HiredisPacking`."""


_WITH_HIREDIS: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: HiredisPackConnection,
    SSLConnection: HiredisSSLConnection,
    UnixDomainSocketConnection: HiredisUnixConnection,
}


def with_hiredis(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """The :class:`HiredisPacking` form of redis-py's ``connection_class`` (TCP, TLS or a Unix
    socket); another class as it is."""
    return _WITH_HIREDIS.get(connection_class, connection_class)


class BoundedPool(ConnectionPool):
    """A pool of at most ``max_connections`` connections where a command that finds them all
    busy waits up to ``timeout`` s for one to be released, then fails with
    :class:`MaxConnectionsError` naming the cap: a burst queues briefly, and an exhausted pool
    is told apart from a Redis that does not answer.

    redis-py's ``BlockingConnectionPool`` does the same with a condition and a timer on every
    command (10-40% fewer GETs a second than the plain pool in a quick local run); here only a
    command that finds the pool full waits, on a future that a release resolves.
    """

    def __init__(self, *args: Any, timeout: float = POOL_WAIT_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout = timeout
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def checked_out(self) -> int:
        """Connections handed out and not given back yet (a cancelled call must give its
        connection back: docs/failure-modes.md, F19)."""
        return len(self._in_use_connections)

    def _exhausted(self) -> MaxConnectionsError:
        return MaxConnectionsError(
            f"all {self.max_connections} Redis connections of this process were busy for "
            f"{self.timeout} s (DTQ_REDIS_MAX_CONNECTIONS)"
        )

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            if self.can_get_connection():
                try:
                    return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
                except MaxConnectionsError:
                    pass  # taken between the check and the pool's lock
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise self._exhausted()
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                raise self._exhausted() from None
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass on the release this caller no longer takes
                raise
            finally:
                if not waiter.done():
                    waiter.cancel()

    async def release(self, connection: Any) -> None:
        await super().release(connection)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break
