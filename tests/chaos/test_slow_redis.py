"""B10: a slow link to Redis. A proxy in the test process delays every chunk each way; the
worker talks to Redis only through it. With a round trip well under the visibility timeout
minus the heartbeat interval, long tasks are not reclaimed by mistake: each runs once, at
attempt 1, and the worker's lease extensions keep up."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.connection import connect
from dtq_core.testing import RedisServer
from dtq_core.testing.history import check_history, queue_events, settle
from dtq_core.testing.processes import services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow


class DelayProxy:
    """TCP proxy to Redis that holds every chunk ``delay_s`` in each direction, in order."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                await asyncio.sleep(max(0.0, due - loop.time()))
                dst.write(chunk)
                await dst.drain()
            dst.close()

        sender = asyncio.create_task(deliver())
        try:
            while chunk := await src.read(65536):
                queue.put_nowait((loop.time() + self.delay_s, chunk))
        except ConnectionError:
            pass
        queue.put_nowait((0.0, b""))
        with contextlib.suppress(ConnectionError):
            await sender

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in self.writers:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


@pytest.mark.parametrize("one_way_ms", [50, 200])
async def test_a_slow_link_causes_no_spurious_reclaim(
    redis_server: RedisServer, tmp_path: Path, one_way_ms: int, faults: FaultFigures
) -> None:
    client = Client.from_url(redis_server.url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    side_url = redis_server.url.replace("/0", "/1")  # reached directly, not through the proxy
    side = connect(side_url)
    proxy = DelayProxy(redis_server.port, one_way_ms / 1000)
    port = await proxy.start()
    # VT 2 s, heartbeat 0.5 s (FAST_ENV); each task runs 1.5 visibility timeouts.
    worker = worker_process(
        f"redis://127.0.0.1:{port}/0",
        tmp_path / "w.log",
        concurrency=8,
        env={"DTQTEST_SIDE_URL": side_url},
    )
    try:
        with services(worker):
            handles = [await client.enqueue("sleep", args=[3.0]) for _ in range(16)]
            ids = [h.id for h in handles]

            settle_s = await settle(client.redis, ids, timeout=90, interval=0.5)
        check = await check_history(client.redis, ids, side=side)
        events = await queue_events(client.redis, client.queue_keys("default"))
        reclaimed = [e for e in events if e.type == "task.requeued"]
        attempts = [(await client.get(t)).attempts for t in ids]  # type: ignore[union-attr]
        faults.record(
            f"B10 slow Redis link ({one_way_ms} ms each way)",
            check,
            one_way_ms=one_way_ms,
            reclaimed=len(reclaimed),
            max_attempt=max(attempts),
            settle_s=round(settle_s, 2),
        )
        check.assert_clean(max_dup_exec=0)
        assert reclaimed == []
        assert max(attempts) == 1
    finally:
        await proxy.stop()
        await side.aclose()
        await client.aclose()
