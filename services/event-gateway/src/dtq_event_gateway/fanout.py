"""One reader per process: Redis event streams -> bounded client queues.

The reader follows every queue's event stream (the queue registry is re-read every second; a
queue that appears later is read from its start) and the global stream, with one blocking
``XREAD`` on a connection of its own. It hands each event to every client whose filter
matches with ``put_nowait`` and never awaits a client: a client whose queue is full is cut
(its writer sends a gap message and closes), so a slow socket can neither stall the reader nor
grow the process's memory (failure modes F18 and D2, docs/failure-modes.md).

When Redis fails, the reader backs off (capped, jittered), every client stays connected and
gets one ``degraded`` frame, then ``recovered`` once Redis answers again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import cast

import msgspec
import redis.asyncio as aioredis
import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import StreamReply, connect, xread
from dtq_core.infra.loops import run_supervised
from dtq_core.infra.settings import Settings
from dtq_core.messages import expand_events
from dtq_core.names import logical_queue, valid_stored_name
from dtq_core.protocol.keys import Keys
from dtq_event_gateway import frames, replay
from dtq_event_gateway.cursor import GLOBAL_STREAM, START, Position
from dtq_event_gateway.filters import EventFilter
from dtq_event_gateway.frames import OVERFLOW, Control, Delivery, Item
from dtq_event_gateway.metrics import GatewayMetrics
from dtq_event_gateway.replay import StreamInfo

log = structlog.get_logger()

BLOCK_MS = 1000
READ_COUNT = 500
YIELD_EVERY = 100
"""Events offered between two pauses of the reader (client buffers hold many more)."""
REFRESH_S = 1.0
"""How often the queue registry is re-read; a new queue's events wait at most this long."""


def redis_backoff() -> Backoff:
    """The gateway's delays between Redis tries (the reader's and a replay's): from 0.1 s,
    never more than 2 s, so clients see Redis again within 2 s of its return."""
    return Backoff(base=0.1, cap=2.0)


class Subscriber:
    """One client's bounded queue, as the reader sees it."""

    __slots__ = ("cut", "filter", "live", "overflowed", "queue", "transport")

    def __init__(self, flt: EventFilter, transport: str, limit: int) -> None:
        self.filter = flt
        self.transport = transport
        self.queue: asyncio.Queue[Item] = asyncio.Queue(limit)
        self.overflowed = False
        self.live = False
        """False while the client is replayed from Redis: an overflow then costs nothing."""
        self.cut = asyncio.Event()
        """Set when the queue of a live client overflowed."""

    def offer(self, item: Item) -> None:
        """Queue ``item`` without waiting; on overflow drop everything and mark the queue."""
        if self.overflowed:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.overflowed = True
            self._drop()
            self.queue.put_nowait(OVERFLOW)
            if self.live:
                self.cut.set()

    def restart(self) -> None:
        """Forget an overflow that happened during replay (what it dropped is in Redis)."""
        self._drop()
        self.overflowed = False

    def _drop(self) -> None:
        while not self.queue.empty():
            self.queue.get_nowait()


class Fanout:
    """The reader and the registry of subscribers."""

    def __init__(self, settings: Settings, metrics: GatewayMetrics) -> None:
        self.keys = Keys(settings.namespace)
        self.metrics = metrics
        # A dedicated connection: XREAD BLOCK holds it; the timeout is above the block time.
        self.redis: aioredis.Redis = connect(
            settings,
            client_name="dtq-event-gateway-reader",
            socket_timeout=BLOCK_MS / 1000 + 5,
            max_connections=1,
        )
        self.positions: dict[str, Position] = {}
        self.snapshot: Mapping[str, Position] = {}
        self._keys: dict[str, str] = {}
        self._streams: dict[str, str] = {}
        self._all: set[Subscriber] = set()
        self._by_stream: dict[str, set[Subscriber]] = {}
        self.started = asyncio.Event()
        self.degraded = False
        self._next_refresh = 0.0

    # -- subscribers ------------------------------------------------------------------------

    def key_of(self, stream: str) -> str:
        key = self._keys.get(stream)
        if key is None:
            key = self.keys.events if stream == GLOBAL_STREAM else self.keys.queue(stream).events
            self._keys[stream] = key
            self._streams[key] = stream
        return key

    def subscribe(self, sub: Subscriber) -> dict[str, Position]:
        """Register a client; returns the reader's position in the streams it follows.

        Everything after those positions will be offered to it: registration and positions
        are taken in one step of the event loop, while the reader waits for Redis or pauses.
        """
        flt = sub.filter
        if flt.queues is None:
            self._all.add(sub)
            start = dict(self.positions)
        else:
            # Keyed by queue: the events of every partition of a queue go to its followers.
            for q in flt.queues:
                self._by_stream.setdefault(q, set()).add(sub)
            start = {q: self.positions.get(q, START) for q in sorted(flt.queues)}
            start.update(
                (s, p) for s, p in self.positions.items() if flt.follows(s) and s != GLOBAL_STREAM
            )
        if self.degraded:
            sub.offer(Control("degraded", "redis_unavailable"))
        return start

    def unsubscribe(self, sub: Subscriber) -> None:
        self._all.discard(sub)
        for q in sub.filter.queues or ():
            subs = self._by_stream.get(q)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._by_stream[q]

    def subscribers(self) -> set[Subscriber]:
        return self._all.union(*self._by_stream.values())

    def count(self, transport: str) -> int:
        return sum(1 for s in self.subscribers() if s.transport == transport)

    def broadcast(self, item: Item) -> None:
        for sub in self.subscribers():
            sub.offer(item)

    # -- reading ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Read until cancelled; Redis failures are waited out, never raised."""
        await run_supervised(self._read_once, backoff=redis_backoff(), on_error=self._read_failed)

    async def _read_once(self) -> float:
        if not self.started.is_set():
            await self._start()
        elif time.monotonic() >= self._next_refresh:
            await self._refresh()
        if self.degraded:
            self._recover()
        reply = await xread(
            self.redis,
            {self.key_of(s): str(p) for s, p in self.positions.items()},
            count=READ_COUNT,
            block_ms=BLOCK_MS,
        )
        await self._dispatch(reply, await self._trimmed(reply) if reply else set())
        return 0.0

    def _read_failed(self, exc: Exception, _delay: float) -> None:
        """Count the failure; the first of a run tells every client (one ``degraded``)."""
        self.metrics.redis_errors.inc()
        self._next_refresh = 0.0
        if not self.degraded:
            self.degraded = True
            log.warning("gateway_degraded", error=str(exc) or type(exc).__name__)
            self.broadcast(Control("degraded", "redis_unavailable"))

    async def aclose(self) -> None:
        await self.redis.aclose()

    async def _queue_names(self) -> set[str]:
        members = cast(set[str], await self.redis.smembers(self.keys.queues))
        return {q for q in members if valid_stored_name(q)}

    async def _start(self) -> None:
        """Begin at the end of every stream (a client without a cursor starts live)."""
        streams = [GLOBAL_STREAM, *sorted(await self._queue_names())]
        async with self.redis.pipeline(transaction=False) as pipe:
            for s in streams:
                await pipe.xrevrange(self.key_of(s), count=1)
            tails = await pipe.execute()
        for s, tail in zip(streams, tails, strict=True):
            self.positions[s] = Position.of_entry(tail[0][0]) if tail else START
        self.snapshot = dict(self.positions)
        self._next_refresh = time.monotonic() + REFRESH_S
        self.started.set()
        log.info("gateway_reading", streams=len(streams))

    async def _refresh(self) -> None:
        names = await self._queue_names()
        self._next_refresh = time.monotonic() + REFRESH_S
        known = self.positions.keys() - {GLOBAL_STREAM}
        if names == known:
            return
        for q in names - known:
            self.positions[q] = START  # a new queue: all its events are new
        for q in known - names:
            del self.positions[q]
        self.snapshot = dict(self.positions)

    def _recover(self) -> None:
        self.degraded = False
        log.info("gateway_recovered")
        self.broadcast(Control("recovered"))

    async def _trimmed(self, reply: StreamReply) -> set[str]:
        """Streams of ``reply`` that lost entries the reader had not read yet.

        The reader only falls that far behind when frozen or starved (events arriving faster
        than it reads, beyond DTQ_EVENTS_MAXLEN); its clients then get an explicit gap rather
        than a silent hole. The rule is :func:`replay.check`'s, on the reader's position.
        """
        async with self.redis.pipeline(transaction=False) as pipe:
            for key, _ in reply:
                await pipe.xinfo_stream(key)
            infos = await pipe.execute(raise_on_error=False)
        lost: set[str] = set()
        for (key, _), info in zip(reply, infos, strict=True):
            if isinstance(info, BaseException):
                continue
            stream = self._streams[key]
            gap = replay.check(self.positions[stream], StreamInfo.parse(info))
            if gap is not None and gap.reason == "retention":
                lost.add(stream)
        return lost

    def _targets(self, stream: str) -> list[Subscriber]:
        return list(self._all.union(self._by_stream.get(logical_queue(stream), ())))

    async def _dispatch(self, reply: StreamReply, lost: set[str]) -> None:
        """Offer every event of ``reply``; let the writers run every :data:`YIELD_EVERY`.

        Without the pauses one read (up to 500 entries per stream, each maybe a batch of
        thousands) would land in every queue at once and overflow even fast clients. At each
        pause ``positions`` says exactly how far the reader got, and the subscribers are
        looked up again: a client that subscribes during a pause starts at that point.
        """
        snapshot = self.snapshot
        budget = YIELD_EVERY
        for key, entries in reply:
            stream = self._streams[key]
            subs = self._targets(stream)
            queue = None if stream == GLOBAL_STREAM else stream
            if stream in lost:
                log.warning("reader_fell_behind_retention", stream=key)
                gap = Control("gap", "retention", queue, stream, self.positions[stream])
                for sub in subs:
                    sub.offer(gap)
            for entry_id, fields in entries:
                try:
                    events = expand_events(queue, entry_id, fields)
                except (KeyError, ValueError, msgspec.DecodeError):
                    log.error("event_entry_malformed", stream=key, entry_id=entry_id)
                    events = []
                self.metrics.read(len(events))
                count = len(events)
                for i, event in enumerate(events):
                    budget -= 1
                    if budget < 0:
                        self.positions[stream] = Position.after_event(entry_id, i - 1, count)
                        await asyncio.sleep(0)
                        subs = self._targets(stream)
                        budget = YIELD_EVERY
                    matching = [s for s in subs if s.filter.matches(event.type, event.task_id)]
                    if not matching:
                        continue
                    head, tail = frames.split(event)
                    position = Position.after_event(entry_id, i, count)
                    item = Delivery(
                        stream=stream,
                        position=position,
                        position_text=str(position),
                        type=event.type,
                        ts=event.ts,
                        head=head,
                        tail=tail,
                        snapshot=snapshot,
                    )
                    for sub in matching:
                        sub.offer(item)
                self.positions[stream] = Position.of_entry(entry_id)
        self.snapshot = dict(self.positions)
