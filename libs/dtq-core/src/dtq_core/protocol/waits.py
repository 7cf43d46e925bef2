"""One reader of the lifecycle-event streams for every task a client waits for.

A wait that blocked on ``XREAD`` itself would hold a pooled connection for its whole duration:
a hundred long-polls took all of the API's connections and every submit got a 503. Instead,
:meth:`Client.wait` registers a future here; one task reads the event streams of every queue
with a waiter, on a connection of its own (:func:`dtq_core.infra.connection.companion`), and
resolves the futures of the tasks whose terminal event it sees. A thousand waits cost one
connection and one blocking read.

The reader starts with the first waiter and stops when the last one leaves (its one
connection stays open, idle, until the client is closed). A waiter on a queue the reader does
not read yet interrupts the blocking read, so that the read starts again with that queue's
stream (redis-py closes a connection whose read was cancelled and reconnects on the next read,
about a millisecond).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from dtq_core.errors import RedisUnavailableError
from dtq_core.infra.connection import (
    BLOCKING_READ_MS,
    REDIS_DOWN,
    StreamReply,
    client_name,
    companion,
    disconnect,
    unavailable,
    xread,
)
from dtq_core.messages import TERMINAL_EVENTS

READ_COUNT = 500
"""Entries read per stream and round trip."""


class EventWaiter:
    """Wakes waiters when their task's terminal event is written (one reader per client)."""

    def __init__(self, redis: aioredis.Redis) -> None:
        # Named after the client it serves (CLIENT LIST shows `dtq-ingest-api:waits`).
        base = client_name(redis)
        self.redis = companion(redis, client_name=f"{base}:waits" if base else "dtq-waits")
        self._waiters: dict[tuple[str, str], set[asyncio.Future[None]]] = {}
        self._per_stream: dict[str, int] = {}
        self._positions: dict[str, str] = {}
        """Last entry id read (or the tail a first waiter saw) per stream with waiters."""
        self._reader: asyncio.Task[None] | None = None
        self._read: asyncio.Task[StreamReply] | None = None
        self._abandoned: set[asyncio.Task[StreamReply]] = set()
        """Reads cancelled when the reader ended, until they are over (``aclose`` waits)."""
        self._reading: frozenset[str] = frozenset()

    @property
    def waiting(self) -> int:
        """Waiters registered now."""
        return sum(len(futures) for futures in self._waiters.values())

    @property
    def reading(self) -> bool:
        """Whether the reader runs (it ends after the last waiter left and its read returned)."""
        return self._reader is not None and not self._reader.done()

    @asynccontextmanager
    async def watch(
        self, stream: str, rand: str, since: str
    ) -> AsyncIterator[asyncio.Future[None]]:
        """Register a waiter for the terminal event of task ``rand`` in ``stream``, written
        after entry ``since`` (the stream's tail read before the task's record was checked).

        Yields a future that is done when such an event is read; it raises
        :class:`RedisUnavailableError` when the reader's Redis fails.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = (stream, rand)
        self._waiters.setdefault(key, set()).add(future)
        self._per_stream[stream] = self._per_stream.get(stream, 0) + 1
        # A stream already read keeps its position: every event written from now on is past it.
        self._positions.setdefault(stream, since)
        self._start()
        try:
            yield future
        finally:
            self._forget(stream, key, future)

    def _forget(self, stream: str, key: tuple[str, str], future: asyncio.Future[None]) -> None:
        futures = self._waiters.get(key)
        if futures is not None:
            futures.discard(future)
            if not futures:
                del self._waiters[key]
        left = self._per_stream.get(stream, 0) - 1
        if left > 0:
            self._per_stream[stream] = left
        else:
            self._per_stream.pop(stream, None)
            self._positions.pop(stream, None)
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()  # retrieved: the waiter left before it looked

    def _start(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._run(), name="dtq-waits")
        elif self._read is not None and not self._positions.keys() <= self._reading:
            self._read.cancel()  # a new stream: read again with it

    async def _run(self) -> None:
        reconnected = False
        try:
            while self._positions:
                self._reading = frozenset(self._positions)
                self._read = asyncio.ensure_future(self._xread(dict(self._positions)))
                await asyncio.wait({self._read})
                if self._read.cancelled():
                    continue
                try:
                    reply = self._read.result()
                except REDIS_DOWN as exc:
                    if not reconnected:
                        # The idle connection may have died since the last read (a Redis
                        # restart): read once more on a new one before failing the waiters.
                        reconnected = True
                        await disconnect(self.redis)
                        continue
                    self._fail(unavailable(exc))
                    return
                except RedisError as exc:
                    self._fail(RedisUnavailableError(f"Redis refused the read: {exc}"))
                    return
                reconnected = False
                self._deliver(reply)
        finally:
            # Nothing is awaited from the loop's end to here: a waiter that registers meanwhile
            # sees the reader done and starts a new one.
            if self._read is not None and not self._read.done():
                self._read.cancel()
                self._abandoned.add(self._read)
                self._read.add_done_callback(self._abandoned.discard)
            self._read = None

    async def _xread(self, streams: dict[str, str]) -> StreamReply:
        return await xread(self.redis, streams, count=READ_COUNT, block_ms=BLOCKING_READ_MS)

    def _deliver(self, reply: StreamReply) -> None:
        for stream, entries in reply:
            if not entries or stream not in self._positions:
                continue
            self._positions[stream] = entries[-1][0]
            for _, fields in entries:
                if fields.get("type") not in TERMINAL_EVENTS:
                    continue
                for rand in fields.get("ids", "").split(","):
                    for future in self._waiters.get((stream, rand), ()):
                        if not future.done():
                            future.set_result(None)

    def _fail(self, error: RedisUnavailableError) -> None:
        """Every waiter gets the reader's error; those that wait again start a new reader."""
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)

    async def aclose(self) -> None:
        """Stop the reader (waiters still registered are cancelled) and close its pool."""
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        for futures in self._waiters.values():
            for future in futures:
                future.cancel()
        # A cancelled read may still be on its way: the cancellation can be swallowed while it
        # asks the sentinels for the master (CPython gh-86296, see raise_if_cancelled), and
        # the read then connects after its pool was closed. Its connection outlived the
        # client, and the event loop (ResourceWarning: loop is closed).
        if self._abandoned:
            await asyncio.gather(*self._abandoned, return_exceptions=True)
        await self.redis.aclose()
