"""Fixtures: gateways served by uvicorn on real sockets, and WS/SSE clients for them.

One fixture, ``kit``, bundles what the tests need (helpers in ``tests/`` are not importable
under ``--import-mode=importlib``):

- ``await kit.gateway(**limits)`` serves ``create_app`` in this process on a free port, with
  the same uvicorn options as ``dtq-event-gateway``; tests pass limits (``client_buffer``) and
  read the gateway's state.
- ``await kit.open(transport, base, **params)`` connects a WebSocket or SSE client behind one
  interface, so each behaviour is tested on both transports.
- ``kit.publish``, ``kit.collect``, ``kit.settled``: write events, read them, and wait for the
  fact that everything written was handed to the sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
import msgspec
import pytest
import redis.asyncio as aioredis
import uvicorn
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from dtq_core.infra.settings import Settings
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import free_port, metric_value, wait_until
from dtq_event_gateway.__main__ import uvicorn_config
from dtq_event_gateway.app import create_app
from dtq_event_gateway.cursor import GLOBAL_STREAM, Position
from dtq_event_gateway.gateway import Gateway

TRANSPORTS = ["ws", "sse"]
CONTROL = {"subscribed", "degraded", "recovered", "pong"}
"""Frames that are not about tasks (``gap`` is not here: tests look for it)."""


class ClosedError(Exception):
    """The server ended the connection: ``code`` is the WebSocket close code (None for SSE)."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"closed: {code} {reason}")
        self.code = code
        self.reason = reason


class RefusedError(Exception):
    """The server answered the connection attempt with an HTTP error."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"refused: {status} {body}")
        self.status = status
        self.body = body


@dataclass
class Running:
    port: int
    server: uvicorn.Server
    gateway: Gateway

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def refused(self, reason: str) -> float:
        """``dtq_gateway_refused_total{reason=...}`` as ``/metrics`` shows it."""
        return metric_value(
            self.gateway.metrics.registry, "dtq_gateway_refused_total", reason=reason
        )

    def gaps(self, reason: str) -> float:
        """``dtq_gateway_gaps_total{reason=...}`` as ``/metrics`` shows it."""
        return metric_value(self.gateway.metrics.registry, "dtq_gateway_gaps_total", reason=reason)


@dataclass
class WsStream:
    conn: ClientConnection
    transport: str = "ws"
    frames: list[dict[str, Any]] = field(default_factory=list)

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        try:
            async with asyncio.timeout(timeout):
                text = await self.conn.recv()
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            raise ClosedError(rcvd.code if rcvd else None, rcvd.reason if rcvd else "") from None
        frame: dict[str, Any] = msgspec.json.decode(text)
        self.frames.append(frame)
        return frame

    async def send(self, data: str | bytes) -> None:
        await self.conn.send(data)

    async def close(self) -> None:
        await self.conn.close()


@dataclass
class SseStream:
    client: httpx.AsyncClient
    response: httpx.Response
    transport: str = "sse"
    frames: list[dict[str, Any]] = field(default_factory=list)
    pings: int = 0
    _lines: AsyncIterator[str] | None = None

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        if self._lines is None:
            self._lines = self.response.aiter_lines()
        fields: dict[str, str] = {}
        async with asyncio.timeout(timeout):
            while True:
                try:
                    line = await anext(self._lines)
                except (StopAsyncIteration, httpx.ReadError, httpx.RemoteProtocolError):
                    raise ClosedError(None) from None
                if line.startswith(":"):
                    self.pings += 1
                elif line:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                elif fields:
                    break
        frame: dict[str, Any] = msgspec.json.decode(fields["data"])
        # The SSE envelope agrees with the frame: browsers resume with the id.
        assert fields["id"] == frame["cursor"]
        assert fields["event"] == frame["type"]
        self.frames.append(frame)
        return frame

    async def close(self) -> None:
        await self.response.aclose()
        await self.client.aclose()


class Kit:
    Closed = ClosedError
    Refused = RefusedError

    def __init__(self, settings: Settings, redis: aioredis.Redis) -> None:
        self.settings = settings
        self.redis = redis
        self.keys = Keys()
        self._servers: list[tuple[Running, asyncio.Task[None]]] = []
        self._streams: list[Any] = []

    async def gateway(self, settings: Settings | None = None, **limits: Any) -> Running:
        """A gateway on ``settings`` (default: the test's Redis) with ``limits``."""
        app = create_app(settings or self.settings, **limits)
        port = free_port()
        config = uvicorn_config(
            app,
            "127.0.0.1",
            port,
            loop="asyncio",
            log_level="warning",
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        run = Running(port, server, app.state.gateway)
        self._servers.append((run, task))
        await wait_until(lambda: server.started or task.done(), message="gateway serving")
        assert server.started, "gateway did not start"
        await wait_until(run.gateway.fanout.started.is_set, message="gateway reading")
        return run

    async def open(
        self,
        transport: str,
        base: str,
        *,
        headers: dict[str, str] | None = None,
        rcvbuf: int | None = None,
        **params: Any,
    ) -> Any:
        """A connected client; ``RefusedError`` when the server says no. ``rcvbuf`` makes the
        client's socket buffer tiny (a WebSocket client that is not read stalls at once)."""
        query = urlencode({k: v for k, v in params.items() if v is not None}, doseq=True)
        stream: Any
        if transport == "ws":
            sock = None
            if rcvbuf is not None:
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
                sock.setblocking(False)
                port = int(base.rsplit(":", 1)[1])
                await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            try:
                conn = await ws_connect(
                    f"{base.replace('http', 'ws', 1)}/ws/events?{query}",
                    additional_headers=headers,
                    sock=sock,
                    max_queue=1 if rcvbuf is not None else 64,
                    open_timeout=5,
                    close_timeout=1,
                )
            except InvalidStatus as exc:
                response = exc.response
                raise RefusedError(response.status_code, response.body.decode()) from None
            stream = WsStream(conn)
        else:
            client = httpx.AsyncClient(timeout=httpx.Timeout(10, read=None))
            request = client.build_request(
                "GET", f"{base}/sse/events?{query}", headers=headers or {}
            )
            response = await client.send(request, stream=True)
            if response.status_code != 200:
                await response.aread()
                await client.aclose()
                raise RefusedError(response.status_code, response.text)
            stream = SseStream(client, response)
        self._streams.append(stream)
        return stream

    async def subscribed(self, transport: str, base: str, **kwargs: Any) -> Any:
        """:meth:`open`, then the ``subscribed`` frame: the client is registered (live)."""
        stream = await self.open(transport, base, **kwargs)
        first = await stream.next()
        assert first["type"] == "subscribed", first
        return stream

    async def publish(
        self,
        queue: str,
        n: int,
        *,
        batch: int = 1,
        pad: int = 0,
        maxlen: int | None = None,
        atomic: bool = False,
    ) -> list[str]:
        """XADD ``n`` task.progress events (the scripts' field shape) to ``queue``'s stream,
        ``batch`` tasks per entry (``atomic``: in one MULTI); returns the task ids in order."""
        await self.redis.sadd(self.keys.queues, queue)
        progress = msgspec.json.encode({"value": 0.5, "message": secrets.token_hex(pad // 2)})
        rands = [secrets.token_hex(16) for _ in range(n)]
        async with self.redis.pipeline(transaction=atomic) as pipe:
            for start in range(0, n, batch):
                chunk = rands[start : start + batch]
                fields = {
                    "type": "task.progress",
                    "ids": ",".join(chunk),
                    "tasks": ",".join(["bench"] * len(chunk)),
                    "att": ",".join(["1"] * len(chunk)),
                    "progress": progress.decode(),
                }
                key = self.keys.queue(queue).events
                await pipe.xadd(key, fields, maxlen=maxlen, approximate=True)
            await pipe.execute()
        return [f"{queue}:{r}" for r in rands]

    @staticmethod
    async def collect(stream: Any, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The next ``count`` frames that are not control frames (gaps are returned)."""
        out: list[dict[str, Any]] = []
        async with asyncio.timeout(timeout):
            while len(out) < count:
                frame = await stream.next(timeout)
                if frame["type"] not in CONTROL:
                    out.append(frame)
        return out

    async def settled(self, run: Running) -> bool:
        """The reader has offered every entry in Redis and every client queue is empty.

        A writer takes an item and sends it without yielding while its socket is not full,
        so empty queues mean every frame was handed to a socket.
        """
        fanout = run.gateway.fanout
        streams = {GLOBAL_STREAM: self.keys.events}
        for q in await self.redis.smembers(self.keys.queues):
            streams[q] = self.keys.queue(q).events
        for name, key in streams.items():
            tail = await self.redis.xrevrange(key, count=1)
            if tail and fanout.positions.get(name) != Position.of_entry(tail[0][0]):
                return False
        return all(s.queue.empty() for s in fanout.subscribers())

    async def aclose(self) -> None:
        for s in self._streams:
            with contextlib.suppress(Exception):
                await s.close()
        for run, _ in self._servers:
            run.server.should_exit = True
        for _, task in self._servers:
            await asyncio.wait_for(task, 15)


@pytest.fixture
async def kit(settings: Settings, redis: aioredis.Redis) -> AsyncIterator[Kit]:
    k = Kit(settings, redis)
    yield k
    await k.aclose()
