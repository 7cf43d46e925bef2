"""G5: one worker serving many queues, all idle but one.

An idle queue costs its worker a share of a parked wake-up read and a reclaim look once a
visibility timeout, so the cost of idleness is measured: Redis commands and CPU a second and
the worker's CPU while nothing arrives, then the latency of the busy queue under a steady load
and of the first task into long-idle queues. Every task runs once (the full checker); the
figures are recorded, with generous bounds."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

import pytest

from dtq_core import Client
from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.history import check_history, settle
from dtq_devtools.testing.processes import services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

IDLE_QUEUES = int(os.environ.get("DTQTEST_IDLE_QUEUES", "49"))
"""Idle queues beside the busy one: 49 in CI (two wake-up reads watch them all). The
catalogue's figures are taken with ``DTQTEST_IDLE_QUEUES=199`` and ``999`` (1,000 queues, about
32 reads): see docs/testing.md, G5."""
IDLE_S = 10.0
BUSY_RATE = 20
BUSY_S = 10.0
PROBES = 10


async def _commands(client: Client) -> int:
    return int((await client.redis.info("stats"))["total_commands_processed"])


async def _redis_cpu(client: Client) -> float:
    """CPU seconds Redis has used: a load figure that does not depend, as the commands a
    second do, on how fast a loaded machine lets the worker send them."""
    cpu = await client.redis.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def _starts(entries: list[str]) -> dict[str, float]:
    """The first execution start of each task (``<task id>|<attempt>|<pid>|<time>``)."""
    out: dict[str, float] = {}
    for entry in entries:
        task_id, _, _, ts = entry.split("|")
        out.setdefault(task_id, float(ts))
    return out


async def test_many_mostly_idle_queues_cost_little_and_delay_nothing(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    side_server = RedisServer(tmp_path / "side", appendonly=False)
    side_server.start()
    side = connect(side_server.url)
    idle = [f"idle{i}" for i in range(IDLE_QUEUES)]
    client = Client.from_url(server.url, max_queue_depth=0)
    worker = worker_process(
        server.url,
        tmp_path / "worker.log",
        queues=",".join(["default", *idle]),
        concurrency=8,
        env={"DTQTEST_SIDE_URL": side_server.url},
    )
    submitted: dict[str, float] = {}
    try:
        with services(worker):
            await wait_until(lambda: client.redis.zcard(client.keys.workers), timeout=30)

            async def registered() -> bool:
                return await client.redis.scard(client.keys.queues) == IDLE_QUEUES + 1

            await wait_until(registered, timeout=30)
            # One task through every queue first: each has its groups and a parked wake-up
            # read, as queues that have been used do.
            for queue in ["default", *idle]:
                sent = time.time()
                handle = await client.enqueue("sleep", args=[0], queue=queue)
                submitted[handle.id] = sent
            await settle(client.redis, submitted, timeout=60)
            # Idle: nothing arrives.
            commands, cpu, started = await _commands(client), worker.cpu_seconds(), time.monotonic()
            redis_cpu = await _redis_cpu(client)
            await asyncio.sleep(IDLE_S)  # the measured window itself, not a synchronisation
            elapsed = time.monotonic() - started
            idle_ops = (await _commands(client) - commands) / elapsed
            idle_redis_cpu = (await _redis_cpu(client) - redis_cpu) / elapsed
            idle_cpu = (worker.cpu_seconds() - cpu) / elapsed
            clients = int((await client.redis.info("clients"))["connected_clients"])
            # Busy: a steady load on one queue, and a first task into a few idle ones.
            busy: list[str] = []
            probes: list[str] = []
            start = time.monotonic()
            for i in range(int(BUSY_RATE * BUSY_S)):
                due = start + i / BUSY_RATE
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
                sent = time.time()
                handle = await client.enqueue("sleep", args=[0.01])
                submitted[handle.id] = sent
                busy.append(handle.id)
                if i % (BUSY_RATE * BUSY_S // PROBES) == 0:
                    queue = idle[(i * 97) % IDLE_QUEUES]
                    sent = time.time()
                    probe = await client.enqueue("sleep", args=[0], queue=queue)
                    submitted[probe.id] = sent
                    probes.append(probe.id)
            settle_s = await settle(client.redis, submitted, timeout=60)
        check = await check_history(client.redis, submitted, side=side)
        starts = _starts(await side.lrange("exec_start", 0, -1))
        busy_lat = sorted(starts[t] - submitted[t] for t in busy if t in starts)
        probe_lat = sorted(starts[t] - submitted[t] for t in probes if t in starts)
        faults.record(
            f"G5 {IDLE_QUEUES + 1} queues, one busy",
            check,
            queues=IDLE_QUEUES + 1,
            idle_redis_ops_per_s=round(idle_ops, 1),
            idle_redis_cpu=round(idle_redis_cpu, 3),
            idle_worker_cpu=round(idle_cpu, 3),
            redis_clients=clients,
            busy_latency_p50_s=round(statistics.median(busy_lat), 4),
            busy_latency_max_s=round(busy_lat[-1], 4),
            idle_queue_latency_s=[round(x, 3) for x in probe_lat],
            settle_s=round(settle_s, 2),
        )
        check.assert_clean()
        assert len(busy_lat) == len(busy)
        assert len(probe_lat) == len(probes)
        # Generous bounds on a shared machine: idleness must not spin a core, and no task waits
        # for its queue's turn of a read (seconds, as when each queue had a read of its own
        # and the reads were rationed; milliseconds here).
        assert idle_cpu < 0.5
        assert busy_lat[-1] < 3.0
        assert probe_lat[-1] < 3.0
    finally:
        await side.aclose()
        await client.aclose()
        server.stop()
        side_server.stop()
