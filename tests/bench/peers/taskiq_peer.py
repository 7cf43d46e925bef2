"""taskiq's harness (see harness.py): taskiq-redis' ``RedisStreamBroker`` (a stream and a
consumer group, messages acknowledged: the at-least-once broker, as dtq is), no result backend;
the worker is ``taskiq worker`` with one worker process (``--workers 1``) and the concurrency as
``--max-async-tasks``."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import redis.asyncio as aioredis
from harness import DONE, LAT, SLEEP_S, URL, args, gathered, paced_async, report
from taskiq_redis import RedisStreamBroker

broker = RedisStreamBroker(URL)
r = aioredis.Redis.from_url(URL)  # the handlers' own client


@broker.task(task_name="incr")
async def incr() -> None:
    await r.incr(DONE)


@broker.task(task_name="sleep")
async def sleep() -> None:
    await asyncio.sleep(SLEEP_S)
    await r.incr(DONE)


@broker.task(task_name="latency")
async def latency(t_ns: int) -> None:
    lat = time.time_ns() - t_ns
    await r.rpush(LAT, lat)


async def produce(kind: str, n: int, rate: float) -> dict[str, object]:
    await broker.startup()  # declares the consumer group, so tasks sent now wait for a worker
    try:
        if kind == "latency":
            return {"enqueue_ns": await paced_async(latency.kiq, n, rate)}
        task = incr if kind == "incr" else sleep
        t0 = time.perf_counter()
        await gathered(task.kiq, n)
        return {"seconds": time.perf_counter() - t0}
    finally:
        await broker.shutdown()


if __name__ == "__main__":
    ns = args()
    if ns.command == "work":
        taskiq = str(Path(sys.executable).parent / "taskiq")
        argv = [taskiq, "worker", "taskiq_peer:broker", "--workers", "1"]
        argv += ["--max-async-tasks", str(ns.concurrency)]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
        os.execve(taskiq, argv, env)  # noqa: S606 - the peer's own command, by its path
    report(asyncio.run(produce(ns.kind, ns.n, ns.rate)))
