"""B14: Redis kills every client connection over and over while tasks flow (an operator's
``CLIENT KILL TYPE normal``, or a proxy dropping connections). Every reply still reaches the
caller that asked for it: each task's stored result is its own arguments, nothing is lost or
finished twice, and every process reconnects by itself (F19: a cancelled or broken connection
must never hand a reply to the next caller)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from dtq_core import Client, TaskStatus
from dtq_core.errors import RedisUnavailableError
from dtq_core.testing import RedisServer, wait_until
from dtq_core.testing.history import summarize
from dtq_core.testing.processes import services, worker_process

pytestmark = pytest.mark.slow

TASKS = 400


async def test_killed_connections_never_cross_replies(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    admin = Client.from_url(server.url)
    w1 = worker_process(server.url, tmp_path / "w1.log", concurrency=8)
    w2 = worker_process(server.url, tmp_path / "w2.log", concurrency=8)
    kills = 0
    stop = asyncio.Event()

    async def killer() -> None:
        nonlocal kills
        while not stop.is_set():
            # SKIPME yes (the default): the admin connection itself survives.
            kills += int(await admin.redis.execute_command("CLIENT", "KILL", "TYPE", "normal"))
            await asyncio.sleep(0.25)

    ids: dict[str, int] = {}
    refused = 0
    try:
        with services(w1, w2):
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)
            chaos = asyncio.create_task(killer())
            for i in range(TASKS):
                for _ in range(20):  # a lost reply is retried with the same idempotency key
                    try:
                        handle = await client.enqueue("echo", args=[i], idempotency_key=f"k{i}")
                        ids[handle.id] = i
                        break
                    except RedisUnavailableError:
                        refused += 1
                        await asyncio.sleep(0.01)
                await asyncio.sleep(0.005)

            # Kills go on for a while after the last submit (claims and finishes in flight),
            # then stop: a claim whose reply was lost holds its tasks until the reaper takes
            # them back after the visibility timeout.
            await asyncio.sleep(3)
            stop.set()
            await chaos

            try:
                await wait_until(
                    lambda: _all_succeeded(client, ids),
                    timeout=60,
                    interval=0.5,
                    message="every task done",
                )
            except TimeoutError:
                raise AssertionError(await _stuck(client, ids)) from None
            assert w1.alive()
            assert w2.alive()
        summary = await summarize(client.redis, client.queue_keys("default"), set(ids))
        crossed = []
        for task_id, i in ids.items():
            record = await client.get(task_id)
            assert record is not None
            result = record.result or {}
            if (result.get("args"), result.get("kwargs")) != ([i], {}):
                crossed.append((task_id, i, record.result))
        print(
            json.dumps(
                {
                    "test": "B14 connections killed",
                    "connections_killed": kills,
                    "submits_retried": refused,
                    **summary.as_dict(),
                    "crossed_replies": len(crossed),
                }
            )
        )
        assert len(ids) == TASKS
        assert crossed == []
        assert summary.lost == 0
        assert summary.dup_terminal == 0
        assert kills > 10
    finally:
        stop.set()
        await client.aclose()
        await admin.aclose()
        server.stop()


async def _all_succeeded(client: Client, ids: dict[str, int]) -> bool:
    try:
        for task_id in ids:
            record = await client.get(task_id)
            if record is None or record.status is not TaskStatus.SUCCEEDED:
                return False
    except RedisUnavailableError:
        return False  # our own connection was killed: ask again
    return True


async def _stuck(client: Client, ids: dict[str, int]) -> str:
    """Where the tasks that did not finish are: their records and the queue's PEL."""
    lines = []
    qk = client.queue_keys("default")
    for task_id in ids:
        record = await client.get(task_id)
        if record is None or record.status is not TaskStatus.SUCCEEDED:
            raw = await client.redis.hgetall(qk.task(task_id.split(":", 1)[1]))
            lines.append(f"{task_id}: {raw}")
    for stream in qk.streams:
        if await client.redis.exists(stream):
            pending = await client.redis.xpending_range(stream, "workers", "-", "+", 20)
            lines.append(f"{stream}: len={await client.redis.xlen(stream)} pending={pending}")
    return "tasks that did not finish:\n" + "\n".join(lines)
