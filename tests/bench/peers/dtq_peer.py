"""dtq's harness for the scenarios every system runs (see harness.py), and its task registry:
the worker is ``dtq-worker --app dtq_peer:registry`` with this folder on ``PYTHONPATH``.

Besides ``produce`` and ``work``:

- ``alone --n N --concurrency C``: the ``incr`` handler's Redis call alone, C at a time with the
  same client, no queue (the ceiling of the one-Redis-call drain); prints ``per_s``;
- ``ping --n N``: N ``enqueue`` calls and N ``PING`` round trips on the same client, one at a
  time, interleaved; prints both durations' median and p99 in µs.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from harness import DONE, LAT, SLEEP_S, URL, args, paced_async, report

from dtq_core import Client, TaskContext, TaskRegistry, TaskRequest

QUEUE = "bench"
registry = TaskRegistry()
_redis: aioredis.Redis | None = None


def handler_redis() -> aioredis.Redis:
    """The handlers' own client (redis.asyncio, as a user's handler would make it)."""
    global _redis  # noqa: PLW0603 - one client per worker process
    if _redis is None:
        _redis = aioredis.Redis.from_url(URL)
    return _redis


@registry.task(name="incr", queue=QUEUE)
async def incr(ctx: TaskContext) -> None:
    await handler_redis().incr(DONE)


@registry.task(name="sleep", queue=QUEUE)
async def sleep(ctx: TaskContext) -> None:
    await asyncio.sleep(SLEEP_S)
    await handler_redis().incr(DONE)


@registry.task(name="latency", queue=QUEUE)
async def latency(ctx: TaskContext, t_ns: int) -> None:
    lat = time.time_ns() - t_ns
    await handler_redis().rpush(LAT, lat)


def client() -> Client:
    # No depth limit (20,000 tasks wait before the worker starts) and the queue made by the
    # first submit (the worker registers it only when it starts).
    return Client.from_url(URL, max_queue_depth=0, reject_unknown_queues=False)


async def produce(kind: str, n: int, rate: float) -> dict[str, Any]:
    async with client() as c:
        if kind == "latency":
            ids: list[str] = []

            async def send(t_ns: int) -> None:
                ids.append((await c.enqueue("latency", args=[t_ns], queue=QUEUE)).id)

            durations = await paced_async(send, n, rate)
            return {"enqueue_ns": durations, "ids": ids}
        t0 = time.perf_counter()
        for start in range(0, n, 2000):
            await c.enqueue_many(
                [TaskRequest(task=kind, queue=QUEUE) for _ in range(min(2000, n - start))]
            )
        return {"seconds": time.perf_counter() - t0}


async def alone(n: int, concurrency: int) -> dict[str, Any]:
    r = handler_redis()
    await r.delete(DONE)
    left = n

    async def loop() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await r.incr(DONE)

    await asyncio.gather(*(loop() for _ in range(concurrency)))  # connections made, pool warm
    left = n
    t0 = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    await r.aclose()
    return {"per_s": n / seconds}


async def ping(n: int) -> dict[str, Any]:
    async with client() as c:
        for _ in range(100):  # warm: the connection, the queue, the function library
            await c.redis.ping()
            await c.enqueue("incr", queue=QUEUE)
        pings, enqueues = [], []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            await c.redis.ping()
            t1 = time.perf_counter_ns()
            await c.enqueue("incr", queue=QUEUE)
            pings.append(t1 - t0)
            enqueues.append(time.perf_counter_ns() - t1)
    pings.sort()
    enqueues.sort()
    return {
        "ping_us_p50": statistics.median(pings) / 1000,
        "ping_us_p99": pings[int(n * 0.99) - 1] / 1000,
        "enqueue_us_p50": statistics.median(enqueues) / 1000,
        "enqueue_us_p99": enqueues[int(n * 0.99) - 1] / 1000,
    }


def work(concurrency: int) -> None:
    env = {
        **os.environ,
        "DTQ_REDIS_URL": URL,
        "DTQ_WORKER_CONCURRENCY": str(concurrency),
        "DTQ_WORKER_METRICS_PORT": "0",
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
        ),
    }
    argv = [sys.executable, "-m", "dtq_worker", "--app", "dtq_peer:registry", "--queues", QUEUE]
    os.execve(sys.executable, argv, env)  # noqa: S606 - our own worker, by its absolute path


if __name__ == "__main__":
    ns = args()
    if ns.command == "work":
        work(ns.concurrency)
    elif ns.command == "produce":
        report(asyncio.run(produce(ns.kind, ns.n, ns.rate)))
    elif ns.command == "alone":
        import uvloop

        report(uvloop.run(alone(ns.n, ns.concurrency)))
    else:
        report(asyncio.run(ping(ns.n)))
