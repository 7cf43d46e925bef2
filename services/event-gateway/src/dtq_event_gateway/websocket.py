"""``GET /ws/events``: the WebSocket transport.

Refusals happen before the upgrade, as HTTP responses (401, 403, 503), through the ASGI
``websocket.http.response`` extension. A malformed cursor or filter is answered after the
upgrade with close code 1008 and a reason, which browsers can read (they cannot read a refused
upgrade's body). Keepalive pings are uvicorn's (every 20 s; a peer that does not answer in
20 s is closed).

Per connection three tasks run: the session (the writer), the inbound loop (which must keep
calling ``receive``: uvicorn stops reading the socket, pongs included, until it does), and
the cut timer of a client that overflowed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import msgspec
import structlog
from litestar import WebSocket
from litestar.exceptions import WebSocketDisconnect
from litestar.types import Message

from dtq_event_gateway import access
from dtq_event_gateway.access import Refusal
from dtq_event_gateway.cursor import CursorError
from dtq_event_gateway.filters import FilterError
from dtq_event_gateway.frames import Control
from dtq_event_gateway.gateway import Gateway
from dtq_event_gateway.session import Session

log = structlog.get_logger()

MAX_INBOUND_BYTES = 4096
"""Clients only send pings; anything larger is closed with 1009."""
MAX_INBOUND_PER_S = 20
"""Inbound messages per second before the connection is closed with 1008 (RELIABILITY D3)."""

WS_POLICY = 1008
WS_UNSUPPORTED = 1003
WS_TOO_BIG = 1009
WS_INTERNAL_ERROR = 1011
WS_TRY_AGAIN_LATER = 1013
_REASON_CHARS = 120  # a close reason is at most 123 bytes


BATCH_MAX_FRAMES = 500
"""Frames per WebSocket message in batch mode (bounded, so one message stays small)."""


class WebSocketSink:
    """Writes frames to the socket: one message per frame, or with ``?batch=1`` every frame
    queued at the moment in one message, one JSON object per line. A message costs a system
    call; at hundreds of thousands of frames a second, per-frame messages are the limit."""

    transport = "ws"

    def __init__(self, socket: WebSocket[Any, Any, Any], *, batch: bool = False) -> None:
        self._send = socket.send
        self._batch = batch
        self._held: list[str] = []

    async def send(self, type_: str, cursor: str, text: str) -> None:
        if not self._batch:
            await self._send(cast(Message, {"type": "websocket.send", "text": text}))
            return
        self._held.append(text)
        if len(self._held) >= BATCH_MAX_FRAMES:
            await self.flush()

    async def flush(self) -> None:
        """Write the held frames as one message (batch mode)."""
        if self._held:
            text = "\n".join(self._held)
            self._held = []
            await self._send(cast(Message, {"type": "websocket.send", "text": text}))

    async def ping(self) -> None:
        """Keepalive is uvicorn's protocol-level ping."""


async def _deny(socket: WebSocket[Any, Any, Any], refusal: Refusal) -> None:
    if "websocket.http.response" in (socket.scope.get("extensions") or {}):
        start = {
            "type": "websocket.http.response.start",
            "status": refusal.status,
            "headers": refusal.headers,
        }
        await socket.send(cast(Message, start))
        body = {"type": "websocket.http.response.body", "body": refusal.body}
        await socket.send(cast(Message, body))
    else:  # a server without the extension answers a close before accept with 403
        await socket.close(WS_POLICY, refusal.detail[:_REASON_CHARS])


async def serve(socket: WebSocket[Any, Any, Any], gateway: Gateway) -> None:
    scope = cast(dict[str, Any], socket.scope)
    query_key = access.take_api_key(scope)
    refusal = access.check(gateway.api_keys, scope, query_key, gateway.web_policy)
    if refusal is not None:
        gateway.metrics.refused.labels(refusal.code).inc()
        access.logged(scope, refusal)
        await _deny(socket, refusal)
        return
    refusal = gateway.admit()
    if refusal is not None:
        await _deny(socket, refusal)
        return
    try:
        params = access.query(scope)
        cursor = access.last(params, "cursor")
        try:
            request = gateway.parse(params, cursor)
        except (FilterError, CursorError) as exc:
            gateway.metrics.refused.labels("bad_request").inc()
            await socket.accept()
            short = exc.short if isinstance(exc, FilterError) else str(exc)
            await socket.close(WS_POLICY, short[:_REASON_CHARS])
            return
        refusal = await gateway.wait_started()
        if refusal is not None:
            await _deny(socket, refusal)
            return
        await socket.accept()
        session = Session(
            fanout=gateway.fanout,
            redis=gateway.redis,
            metrics=gateway.metrics,
            flt=request.filter,
            resume=request.resume,
            since_s=request.since_s,
            sink=WebSocketSink(socket, batch=access.last(params, "batch") in {"1", "true"}),
            limit=gateway.limits.client_buffer,
        )
        await _run(socket, session, gateway)
    finally:
        gateway.release()


async def _run(socket: WebSocket[Any, Any, Any], session: Session, gateway: Gateway) -> None:
    started = time.monotonic()
    log.info(
        "client_connected",
        transport="ws",
        resumed=session.resume is not None,
        **session.filter.describe(),
    )
    writer = asyncio.create_task(session.run())
    inbound = asyncio.create_task(_inbound(socket, session))
    cut = asyncio.create_task(session.cut(gateway.limits.cut_grace_s))
    ending = "disconnected"
    close: tuple[int, str] | None = None
    try:
        await asyncio.wait({writer, inbound, cut}, return_when=asyncio.FIRST_COMPLETED)
        if writer.done() and not writer.cancelled() and writer.exception() is None:
            ending = writer.result()
            close = (WS_TRY_AGAIN_LATER, "too slow: reconnect with the gap's cursor")
        elif writer.done() and not writer.cancelled():
            exc = writer.exception()
            if not isinstance(exc, OSError | WebSocketDisconnect):
                log.error("session_failed", transport="ws", exc_info=exc)
                ending, close = "error", (WS_INTERNAL_ERROR, "internal error; reconnect")
        elif inbound.done() and not inbound.cancelled() and inbound.exception() is None:
            close = inbound.result()
            ending = "protocol" if close is not None else ending
        elif cut.done():
            ending = "dropped_slow_consumer"
    finally:
        for task in (writer, inbound, cut):
            task.cancel()
        await asyncio.gather(writer, inbound, cut, return_exceptions=True)
    if close is not None:
        try:
            await socket.close(*close)
        except (OSError, WebSocketDisconnect):
            ending = "disconnected"
    log.info(
        "client_disconnected",
        transport="ws",
        reason=ending,
        sent=session.sent,
        seconds=round(time.monotonic() - started, 3),
    )


async def _inbound(socket: WebSocket[Any, Any, Any], session: Session) -> tuple[int, str] | None:
    """Read what the client sends until it leaves (``None``) or breaks a rule (a close)."""
    window = time.monotonic()
    count = 0
    while True:
        message = await socket.receive()
        if message["type"] == "websocket.disconnect":
            return None
        now = time.monotonic()
        if now - window >= 1.0:
            window, count = now, 0
        count += 1
        if count > MAX_INBOUND_PER_S:
            return WS_POLICY, f"at most {MAX_INBOUND_PER_S} messages a second"
        text = cast(str | None, message.get("text"))
        if text is None:
            return WS_UNSUPPORTED, "only text messages (JSON) are accepted"
        if len(text) > MAX_INBOUND_BYTES or len(text.encode()) > MAX_INBOUND_BYTES:
            return WS_TOO_BIG, f"messages are limited to {MAX_INBOUND_BYTES} bytes"
        try:
            decoded = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return WS_UNSUPPORTED, 'messages must be JSON, e.g. {"type": "ping"}'
        if isinstance(decoded, dict) and decoded.get("type") == "ping":
            session.sub.offer(Control("pong"))
