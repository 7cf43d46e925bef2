"""One client from connect to close: subscribe, replay what it missed, then go live.

Order of work, and why nothing is lost or doubled between replay and live:

1. The client is registered with the reader first. From then on every event the reader reads
   is offered to its queue.
2. With a cursor, each stream it follows is replayed from Redis (``XRANGE``) from the cursor's
   position to the stream's end, which lies beyond what the reader had read at step 1. If the
   queue overflowed meanwhile, nothing is lost: the dropped events are in Redis, so the queue
   is emptied and another replay pass follows.
3. Live: queued events at or before the client's position in their stream were replayed and
   are skipped; the rest are sent. A live client whose queue overflows gets a ``gap`` with its
   last cursor and is closed (it reconnects and is replayed the rest).

The cursor sent with each event holds the client's position in every stream it follows. A live
client also moves its position in quiet streams up to where the reader was (the event's
snapshot): everything before that was offered to it already, matching or not, so a client
filtering a busy queue does not fall behind that queue's retention.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol

import redis.asyncio as aioredis
import structlog

from dtq_core.infra.loops import retry_until_done
from dtq_core.messages import Event, expand_events
from dtq_event_gateway import frames, replay
from dtq_event_gateway.cursor import GLOBAL_STREAM, START, Position, encode_part, encode_parts
from dtq_event_gateway.fanout import Fanout, Subscriber, redis_backoff
from dtq_event_gateway.filters import EventFilter
from dtq_event_gateway.frames import Control, Delivery, Item, Overflow
from dtq_event_gateway.metrics import GatewayMetrics

log = structlog.get_logger()


class Sink(Protocol):
    """Where a session's frames go (a WebSocket or an SSE response).

    ``send`` may hold frames back to write several at once; ``flush`` writes them. The
    session flushes whenever its queue is empty, so holding back never delays a frame past
    the moment there is nothing else to send.
    """

    transport: str

    async def send(self, type_: str, cursor: str, text: str) -> None: ...

    async def flush(self) -> None: ...

    async def ping(self) -> None: ...


class Session:
    """The writer side of one client (the reader side is :class:`~.fanout.Subscriber`)."""

    def __init__(
        self,
        *,
        fanout: Fanout,
        redis: aioredis.Redis,
        metrics: GatewayMetrics,
        flt: EventFilter,
        resume: Mapping[str, Position] | None,
        sink: Sink,
        limit: int,
        ping_s: float | None = None,
        since_s: int | None = None,
    ) -> None:
        self.fanout = fanout
        self.redis = redis
        self.metrics = metrics
        self.filter = flt
        self.resume = resume
        self.since_s = since_s
        self.sink = sink
        self.ping_s = ping_s
        self.sub = Subscriber(flt, sink.transport, limit)
        self.pos: dict[str, Position] = {}
        self._parts: dict[str, str] = {}
        self.sent = 0

    @property
    def cursor(self) -> str:
        """The position after everything this client was sent (or filtered out)."""
        return encode_parts(self._parts.values())

    def _move(self, stream: str, position: Position, text: str | None = None) -> None:
        self.pos[stream] = position
        self._parts[stream] = encode_part(stream, text or position)

    async def run(self) -> str:
        """Serve the client until it is too slow (returns ``"slow_consumer"``).

        Raises whatever the sink raises when the client goes away; the subscription is
        removed in every case.
        """
        # Registered here, not in __init__: a task cancelled before it starts never runs its
        # finally, and would leave a subscriber behind.
        start = self.fanout.subscribe(self.sub)
        try:
            if self.resume is None and self.since_s is not None:
                self.resume = _since(start, self.since_s)
            if self.resume is None:
                for stream, position in start.items():
                    self._move(stream, position)
            else:
                followed = {s for s in self.resume if self.filter.follows(s)} | start.keys()
                for stream in sorted(followed):
                    self._move(stream, self.resume.get(stream, START))
            await self._control("subscribed")
            # A queue that overflowed before the client was live lost nothing: replay it.
            if self.resume is not None or self.sub.overflowed:
                await self._catch_up()
            self.sub.live = True
            return await self._live()
        finally:
            self.fanout.unsubscribe(self.sub)

    async def cut(self, grace_s: float) -> None:
        """Return ``grace_s`` after the client's queue overflowed while live.

        The writer sends the gap and closes as soon as its socket takes it; a client that
        does not read at all is dropped when this returns.
        """
        await self.sub.cut.wait()
        self.metrics.gaps.labels("slow_consumer").inc()
        log.warning("client_too_slow", transport=self.sink.transport, sent=self.sent)
        await asyncio.sleep(grace_s)

    async def _emit(self, event_type: str, head: str, tail: str) -> None:
        cursor = self.cursor
        await self.sink.send(event_type, cursor, head + cursor + tail)
        self.sent += 1
        self.metrics.sent(self.sink.transport)

    async def _control(
        self, type_: str, *, queue: str | None = None, reason: str | None = None
    ) -> None:
        cursor = self.cursor
        text = frames.control(type_, cursor, queue=queue, reason=reason)
        await self.sink.send(type_, cursor, text)
        await self.sink.flush()

    # -- replay -----------------------------------------------------------------------------

    async def _catch_up(self) -> None:
        backoff = redis_backoff()
        while True:
            await retry_until_done(
                self._replay_all,
                event="replay_failed",
                backoff=backoff,
                on_error=lambda _exc, _delay: self.metrics.redis_errors.inc(),
                traceback=False,
            )
            if not self.sub.overflowed:
                return
            # Live events arrived faster than the replay went: read them from Redis too.
            self.sub.restart()

    async def _replay_all(self) -> None:
        for stream in list(self.pos):
            await self._replay(stream)

    async def _replay(self, stream: str) -> None:
        key = self.fanout.key_of(stream)
        queue = None if stream == GLOBAL_STREAM else stream
        while True:
            position = self.pos[stream]
            info, entries = await replay.read_page(self.redis, key, position)
            gap = replay.check(position, info)
            if gap is not None:
                self._move(stream, gap.resume)
                self.metrics.gaps.labels(gap.reason).inc()
                log.info("client_gap", reason=gap.reason, stream=stream)
                await self._control("gap", queue=queue, reason=gap.reason)
            for entry_id, fields in entries:
                await self._replay_entry(stream, queue, entry_id, fields)
            await self.sink.flush()
            if len(entries) < replay.PAGE:
                return

    async def _replay_entry(
        self, stream: str, queue: str | None, entry_id: str, fields: dict[str, str]
    ) -> None:
        try:
            events: list[Event] = expand_events(queue, entry_id, fields)
        except (KeyError, ValueError):
            events = []
        count = len(events)
        for i, event in enumerate(events):
            position = Position.after_event(entry_id, i, count)
            if position <= self.pos[stream]:
                continue  # delivered before the client reconnected
            self._move(stream, position)
            if self.filter.matches(event.type, event.task_id):
                head, tail = frames.split(event)
                await self._emit(event.type, head, tail)
        whole = Position.of_entry(entry_id)
        if self.pos[stream] < whole:
            self._move(stream, whole)

    # -- live -------------------------------------------------------------------------------

    async def _next(self) -> Item | None:
        """The next queued item; ``None`` after a keepalive ping on an idle connection."""
        queue = self.sub.queue
        if not queue.empty():
            return queue.get_nowait()
        await self.sink.flush()
        if self.ping_s is None:
            return await queue.get()
        try:
            async with asyncio.timeout(self.ping_s):
                return await queue.get()
        except TimeoutError:
            await self.sink.ping()
            return None

    async def _live(self) -> str:
        seen: Mapping[str, Position] | None = None
        while True:
            item = await self._next()
            if isinstance(item, Delivery):
                if item.position <= self.pos.get(item.stream, START):
                    continue  # replayed already
                self._move(item.stream, item.position, item.position_text)
                if item.snapshot is not seen:
                    seen = item.snapshot
                    self._advance(seen)
                await self._emit(item.type, item.head, item.tail)
                self.metrics.delay(time.time() - item.ts)
            elif isinstance(item, Control):
                if item.stream is not None and item.position is not None:
                    if self.pos.get(item.stream, START) > item.position:
                        continue  # replayed past the loss already
                    self.metrics.gaps.labels(item.reason or "").inc()
                await self._control(item.type, queue=item.queue, reason=item.reason)
            elif isinstance(item, Overflow):
                await self._control("gap", reason="slow_consumer")
                return "slow_consumer"

    def _advance(self, snapshot: Mapping[str, Position]) -> None:
        for stream, position in snapshot.items():
            if self.filter.follows(stream) and position > self.pos.get(stream, START):
                self._move(stream, position)


def _since(start: Mapping[str, Position], since_s: int) -> dict[str, Position]:
    """Positions ``since_s`` seconds back in every stream a client starts with, as if it had
    a cursor from then; a stream with nothing newer keeps its live position (a position past
    its last entry would read as a reset stream). The window is on this host's clock (the
    gateway's Redis user may not run TIME): good to a clock skew, enough for a look back."""
    floor = Position(max(0, int(time.time() * 1000) - since_s * 1000), 0)
    return {stream: min(position, floor) for stream, position in start.items()}
