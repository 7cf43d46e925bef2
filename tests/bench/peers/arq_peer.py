"""arq's harness (see harness.py): jobs in arq's sorted set, the worker in one process with the
concurrency as ``max_jobs``. arq finds new jobs by polling, every ``poll_delay`` (0.5 s by
default); the bench sets it to 0.01 s, what a user who cares about the time to start would
choose (with the default every task would wait 0.25 s on average). Results kept as by default."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
from arq import create_pool, run_worker
from arq.connections import RedisSettings
from harness import CONCURRENCY, DONE, LAT, SLEEP_S, URL, args, gathered, paced_async, report

POLL_DELAY_S = 0.01
r = aioredis.Redis.from_url(URL)  # the handlers' own client


async def incr(ctx: dict[str, Any]) -> None:
    await r.incr(DONE)


async def sleep(ctx: dict[str, Any]) -> None:
    await asyncio.sleep(SLEEP_S)
    await r.incr(DONE)


async def latency(ctx: dict[str, Any], t_ns: int) -> None:
    lat = time.time_ns() - t_ns
    await r.rpush(LAT, lat)


class WorkerSettings:
    functions = [incr, sleep, latency]  # noqa: RUF012 - arq's settings class
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = CONCURRENCY
    poll_delay = POLL_DELAY_S


async def produce(kind: str, n: int, rate: float) -> dict[str, object]:
    pool = await create_pool(RedisSettings.from_dsn(URL))
    try:
        if kind == "latency":
            durations = await paced_async(lambda t_ns: pool.enqueue_job("latency", t_ns), n, rate)
            return {"enqueue_ns": durations}
        t0 = time.perf_counter()
        await gathered(lambda: pool.enqueue_job(kind), n)
        return {"seconds": time.perf_counter() - t0}
    finally:
        await pool.aclose()


if __name__ == "__main__":
    ns = args()
    if ns.command == "work":
        import uvloop  # the worker's event loop, as for dtq and taskiq

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        run_worker(WorkerSettings, max_jobs=ns.concurrency)  # type: ignore[arg-type]
    else:
        report(asyncio.run(produce(ns.kind, ns.n, ns.rate)))
