"""``GET /sse/events``: the Server-Sent Events transport (a raw ASGI handler).

Each frame is ``id: <cursor>`` / ``event: <type>`` / ``data: <json>``, so a browser's
``EventSource`` resumes by itself with ``Last-Event-ID``, which wins over ``?cursor=`` (an
``EventSource`` reconnects to its original URL). An idle stream gets a ``: ping`` comment
every 15 s. A too-slow client gets its gap message and the stream ends.

This handler owns the response rather than returning a streaming response: it must end the
stream itself (slow client), notice a client that leaves while nothing is sent, and remove the
subscription in every case.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import structlog
from litestar.types import Message, Receive, Scope, Send

from dtq_core.infra.origins import header
from dtq_event_gateway import access, frames
from dtq_event_gateway.access import Refusal
from dtq_event_gateway.cursor import CursorError
from dtq_event_gateway.filters import FilterError
from dtq_event_gateway.gateway import Gateway
from dtq_event_gateway.session import Session

log = structlog.get_logger()

CHUNK_BYTES = 64 * 1024
"""Held frames are written once they reach this size (uvicorn's write buffer high-water mark),
so a slow client still meets flow control with little held back."""

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx: do not buffer the stream
]


class SseSink:
    """Frames queued together are written as one chunk: one system call, not one per event."""

    transport = "sse"

    def __init__(self, send: Send) -> None:
        self._send = send
        self._held: list[str] = []
        self._size = 0

    async def _write(self, text: str) -> None:
        await self._send(
            cast(Message, {"type": "http.response.body", "body": text.encode(), "more_body": True})
        )

    async def send(self, type_: str, cursor: str, text: str) -> None:
        frame = frames.sse(type_, cursor, text)
        self._held.append(frame)
        self._size += len(frame)
        if self._size >= CHUNK_BYTES:
            await self.flush()

    async def flush(self) -> None:
        if self._held:
            text = "".join(self._held)
            self._held.clear()
            self._size = 0
            await self._write(text)

    async def ping(self) -> None:
        await self._write(frames.SSE_PING)


async def _respond(send: Send, refusal: Refusal) -> None:
    start = {"type": "http.response.start", "status": refusal.status, "headers": refusal.headers}
    await send(cast(Message, start))
    await send(cast(Message, {"type": "http.response.body", "body": refusal.body}))


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def serve(scope: Scope, receive: Receive, send: Send, gateway: Gateway) -> None:
    raw = cast(dict[str, Any], scope)
    query_key = access.take_api_key(raw)
    refusal = access.check(gateway.api_keys, raw, query_key, gateway.web_policy)
    if refusal is not None:
        gateway.metrics.refused.labels(refusal.code).inc()
        access.logged(raw, refusal)
        await _respond(send, refusal)
        return
    params = access.query(raw)
    # An EventSource reconnects to its original URL (an old ?cursor=) with the newer
    # Last-Event-ID, so the header wins.
    cursor = header(raw, b"last-event-id") or access.last(params, "cursor")
    try:
        request = gateway.parse(params, cursor)
    except (FilterError, CursorError) as exc:
        gateway.metrics.refused.labels("bad_request").inc()
        await _respond(send, Refusal(400, "bad_request", str(exc)))
        return
    refusal = gateway.admit()
    if refusal is not None:
        await _respond(send, refusal)
        return
    try:
        refusal = await gateway.wait_started()
        if refusal is not None:
            await _respond(send, refusal)
            return
        await send(
            cast(Message, {"type": "http.response.start", "status": 200, "headers": HEADERS})
        )
        session = Session(
            fanout=gateway.fanout,
            redis=gateway.redis,
            metrics=gateway.metrics,
            flt=request.filter,
            resume=request.resume,
            since_s=request.since_s,
            sink=SseSink(send),
            limit=gateway.limits.client_buffer,
            ping_s=gateway.limits.sse_ping_s,
        )
        await _run(session, receive, send, gateway)
    finally:
        gateway.release()


async def _run(session: Session, receive: Receive, send: Send, gateway: Gateway) -> None:
    started = time.monotonic()
    log.info(
        "client_connected",
        transport="sse",
        resumed=session.resume is not None,
        **session.filter.describe(),
    )
    writer = asyncio.create_task(session.run())
    gone = asyncio.create_task(_disconnected(receive))
    cut = asyncio.create_task(session.cut(gateway.limits.cut_grace_s))
    drain = asyncio.create_task(gateway.draining.wait())
    tasks = (writer, gone, cut, drain)
    ending = "disconnected"
    finish = False
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if drain.done():
            ending, finish = "shutdown", True
        elif writer.done() and not writer.cancelled():
            exc = writer.exception()
            if exc is None:
                ending, finish = writer.result(), True
            elif not isinstance(exc, OSError):
                log.error("session_failed", transport="sse", exc_info=exc)
                ending, finish = "error", True
        elif cut.done():
            ending = "dropped_slow_consumer"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if finish:
        await send(cast(Message, {"type": "http.response.body", "body": b"", "more_body": False}))
    log.info(
        "client_disconnected",
        transport="sse",
        reason=ending,
        sent=session.sent,
        seconds=round(time.monotonic() - started, 3),
    )
