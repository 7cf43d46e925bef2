"""A TCP fault proxy between one process and Redis, run inside the test's event loop.

The kernel here has no ``netem`` and a test may not have iptables, so network faults are made
in user space: a process is given the proxy's port instead of Redis', and the test turns the
link bad while it runs. Each process that must fail alone gets a proxy of its own.

- ``delay_s``: every chunk is held that long in each direction, in order (a slow link);
- :meth:`FaultProxy.partition` / :meth:`FaultProxy.heal`: a partition that drops packets
  without closing anything, the way a firewall rule that drops does. Nothing crosses in either
  direction and no connection is closed or reset; what was sent waits, like TCP segments
  being retransmitted, and crosses when the link heals (a closed connection's end included).
  Connections made during the partition are accepted and stay silent until then;
- :meth:`FaultProxy.sever`: every open connection goes silent for good, without a FIN or an
  RST (the far end forgot it: a half-open connection), while new connections work. The
  client learns of it only by a timeout;
- :meth:`FaultProxy.lose_reply_to`: the next command carrying a marker is forwarded, and
  the connection is dropped as its reply comes back, so the command ran but its caller never
  hears of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass
class _Link:
    """One proxied connection: the client side, the Redis side, and its fate."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    severed: bool = False
    lose_next_reply: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def drop(self) -> None:
        for writer in (self.client, self.upstream):
            writer.close()


class FaultProxy:
    """TCP proxy on 127.0.0.1 to the Redis on ``target_port``; ``start()`` returns its port."""

    def __init__(self, target_port: int, *, delay_s: float = 0.0) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.server: asyncio.Server | None = None
        self.port = 0
        self.links: list[_Link] = []
        self.connections = 0
        """Connections accepted so far (a client that reconnects makes new ones)."""
        self.replies_lost = 0
        self._open = asyncio.Event()
        self._open.set()
        self._marker: bytes | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self.port

    @property
    def url(self) -> str:
        """The Redis URL a process behind this proxy is given (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    # -- faults -------------------------------------------------------------------------------

    def partition(self) -> None:
        """Stop every byte in both directions, closing nothing (see the module docstring)."""
        self._open.clear()

    def heal(self) -> None:
        """Let everything held cross, in order, and new bytes flow again."""
        self._open.set()

    @property
    def partitioned(self) -> bool:
        return not self._open.is_set()

    def sever(self) -> int:
        """Make every open connection silent for good, with no FIN and no RST; returns how
        many were open. Connections made afterwards work."""
        live = [link for link in self.links if not link.severed]
        for link in live:
            link.severed = True
        return len(live)

    def lose_reply_to(self, marker: bytes) -> None:
        """The next command whose bytes contain ``marker`` reaches Redis, and its connection
        is dropped when the reply arrives, so the reply is lost."""
        self._marker = marker

    # -- plumbing -----------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self._open.wait()  # a connection made during a partition waits for the heal
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        link = _Link(writer, up_writer)
        self.links.append(link)
        link.tasks += [
            asyncio.create_task(self._pipe(link, reader, up_writer, upstream=True)),
            asyncio.create_task(self._pipe(link, up_reader, writer, upstream=False)),
        ]

    async def _pipe(
        self,
        link: _Link,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._deliver(link, queue, dst))
        link.tasks.append(sender)
        try:
            while chunk := await src.read(65536):
                if upstream and self._marker is not None and self._marker in chunk:
                    self._marker = None
                    link.lose_next_reply = True
                queue.put_nowait((loop.time() + self.delay_s, chunk))
        except ConnectionError:
            pass
        queue.put_nowait((loop.time() + self.delay_s, b""))  # the end crosses like the bytes
        with contextlib.suppress(ConnectionError):
            await sender

    async def _deliver(
        self, link: _Link, queue: asyncio.Queue[tuple[float, bytes]], dst: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            await self._open.wait()
            if link.severed:
                await asyncio.Event().wait()  # silent for good, until the proxy stops
            if not chunk:
                break
            if dst is link.client and link.lose_next_reply:
                self.replies_lost += 1
                link.drop()
                return
            dst.write(chunk)
            await dst.drain()
        dst.close()

    async def stop(self) -> None:
        self._open.set()
        if self.server is not None:
            self.server.close()
        tasks = [task for link in self.links for task in link.tasks]
        for task in tasks:
            task.cancel()
        for link in self.links:
            link.drop()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)
