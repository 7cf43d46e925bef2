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

import time
from collections.abc import Coroutine
from typing import Any, cast

import msgspec
from litestar import WebSocket
from litestar.exceptions import WebSocketDisconnect
from litestar.types import Message

from dtq_event_gateway import access, connect
from dtq_event_gateway.access import Refusal
from dtq_event_gateway.connect import BadRequest, Ending
from dtq_event_gateway.filters import FilterError
from dtq_event_gateway.frames import Control
from dtq_event_gateway.gateway import Gateway
from dtq_event_gateway.session import Session

MAX_INBOUND_BYTES = 4096
"""Clients only send pings; anything larger is closed with 1009."""
MAX_INBOUND_PER_S = 20
"""Inbound messages per second before the connection is closed with 1008 (failure mode D3,
docs/failure-modes.md)."""

WS_POLICY = 1008
WS_UNSUPPORTED = 1003
WS_TOO_BIG = 1009
WS_INTERNAL_ERROR = 1011
WS_TRY_AGAIN_LATER = 1013
WS_SERVICE_RESTART = 1012
_REASON_CHARS = 120  # a close reason is at most 123 bytes

CLOSE_CODES: dict[str, tuple[int, str]] = {
    "slow_consumer": (WS_TRY_AGAIN_LATER, "too slow: reconnect with the gap's cursor"),
    "error": (WS_INTERNAL_ERROR, "internal error; reconnect"),
    "shutdown": (WS_SERVICE_RESTART, "the gateway is shutting down; reconnect"),
}
"""The close of a session that ended on the gateway's side (docs/events.md)."""


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


class WebSocketTransport:
    """The WebSocket framing of :func:`dtq_event_gateway.connect.serve`."""

    name = "ws"
    ping_s: float | None = None  # uvicorn's protocol-level pings
    gone: tuple[type[BaseException], ...] = (OSError, WebSocketDisconnect)

    def __init__(self, socket: WebSocket[Any, Any, Any]) -> None:
        self.socket = socket

    def cursor(self, params: dict[str, list[str]]) -> str | None:
        return access.last(params, "cursor")

    async def refuse(self, refusal: Refusal) -> None:
        await _deny(self.socket, refusal)

    async def reject(self, exc: BadRequest) -> None:
        # Browsers cannot read a refused upgrade's body, but they can read a close reason.
        await self.socket.accept()
        short = exc.short if isinstance(exc, FilterError) else str(exc)
        await self.socket.close(WS_POLICY, short[:_REASON_CHARS])

    async def open(self, params: dict[str, list[str]]) -> WebSocketSink:
        await self.socket.accept()
        return WebSocketSink(self.socket, batch=access.last(params, "batch") in {"1", "true"})

    def watch(self, session: Session) -> Coroutine[Any, Any, tuple[int, str] | None]:
        return _inbound(self.socket, session)

    async def close(self, ending: Ending) -> str:
        close = CLOSE_CODES.get(ending.reason)
        if ending.reason == "protocol":
            close = ending.broken_rule
        if close is None:
            return ending.reason
        try:
            await self.socket.close(*close)
        except (OSError, WebSocketDisconnect):
            return "disconnected"
        return ending.reason


async def serve(socket: WebSocket[Any, Any, Any], gateway: Gateway) -> None:
    await connect.serve(cast(dict[str, Any], socket.scope), WebSocketTransport(socket), gateway)


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
