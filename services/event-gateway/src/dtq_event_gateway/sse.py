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

from typing import Any, cast

from litestar.types import Message, Receive, Scope, Send

from dtq_core.infra.origins import header
from dtq_event_gateway import access, connect, frames
from dtq_event_gateway.access import Refusal
from dtq_event_gateway.connect import BadRequest, Ending
from dtq_event_gateway.gateway import Gateway
from dtq_event_gateway.session import Session

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


class SseTransport:
    """The SSE framing of :func:`dtq_event_gateway.connect.serve`."""

    name = "sse"
    gone: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, scope: dict[str, Any], receive: Receive, send: Send, ping_s: float) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.ping_s: float | None = ping_s

    def cursor(self, params: dict[str, list[str]]) -> str | None:
        # An EventSource reconnects to its original URL (an old ?cursor=) with the newer
        # Last-Event-ID, so the header wins.
        return header(self.scope, b"last-event-id") or access.last(params, "cursor")

    async def refuse(self, refusal: Refusal) -> None:
        await _respond(self.send, refusal)

    async def reject(self, exc: BadRequest) -> None:
        await _respond(self.send, Refusal(400, "bad_request", str(exc)))

    async def open(self, params: dict[str, list[str]]) -> SseSink:
        await self.send(
            cast(Message, {"type": "http.response.start", "status": 200, "headers": HEADERS})
        )
        return SseSink(self.send)

    async def watch(self, session: Session) -> None:
        """Returns when the client disconnects (it sends nothing else)."""
        while (await self.receive())["type"] != "http.disconnect":
            pass

    async def close(self, ending: Ending) -> str:
        if ending.reason in {"shutdown", "slow_consumer", "error"}:
            end = {"type": "http.response.body", "body": b"", "more_body": False}
            await self.send(cast(Message, end))
        return ending.reason


async def serve(scope: Scope, receive: Receive, send: Send, gateway: Gateway) -> None:
    raw = cast(dict[str, Any], scope)
    transport = SseTransport(raw, receive, send, gateway.limits.sse_ping_s)
    await connect.serve(raw, transport, gateway)
