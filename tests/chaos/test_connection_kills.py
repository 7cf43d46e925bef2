"""B14: Redis kills every client connection over and over while tasks flow (an operator's
``CLIENT KILL TYPE normal``, or a proxy dropping connections). Every reply still reaches the
caller that asked for it: each task's stored result is its own arguments, nothing is lost or
finished twice, and every process reconnects by itself (F19: a cancelled or broken connection
must never hand a reply to the next caller)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.errors import RedisUnavailableError
from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.history import check_history, queue_events, settle
from dtq_devtools.testing.processes import services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

TASKS = 400


async def test_killed_connections_never_cross_replies(tmp_path: Path, faults: FaultFigures) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    # The handlers' side effects go to a Redis the killer does not touch.
    side_server = RedisServer(tmp_path / "side", appendonly=False)
    side_server.start()
    side = connect(side_server.url)
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    admin = Client.from_url(server.url)
    env = {"DTQTEST_SIDE_URL": side_server.url}
    w1 = worker_process(server.url, tmp_path / "w1.log", concurrency=8, env=env)
    w2 = worker_process(server.url, tmp_path / "w2.log", concurrency=8, env=env)
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

            settle_s = await settle(client.redis, ids, timeout=60, interval=0.5)
            assert w1.alive()
            assert w2.alive()
        check = await check_history(client.redis, ids, side=side)
        events = await queue_events(client.redis, client.queue_keys("default"))
        reclaimed = sum(1 for e in events if e.type == "task.requeued")
        crossed = []
        for task_id, i in ids.items():
            record = await client.get(task_id)
            assert record is not None
            result = record.result or {}
            if (result.get("args"), result.get("kwargs")) != ([i], {}):
                crossed.append((task_id, i, record.result))
        faults.record(
            "B14 client connections killed every 0.25 s",
            check,
            connections_killed=kills,
            submits_retried=refused,
            crossed_replies=len(crossed),
            reclaimed=reclaimed,
            settle_s=round(settle_s, 2),
        )
        assert len(ids) == TASKS
        assert crossed == []
        # A task runs again only when its attempt was taken back (a lost claim reply whose
        # retry could not tell, a lease that lapsed while the heartbeat reconnected).
        check.assert_clean(max_dup_exec=reclaimed)
        assert kills > 10
    finally:
        stop.set()
        await client.aclose()
        await admin.aclose()
        await side.aclose()
        server.stop()
        side_server.stop()
