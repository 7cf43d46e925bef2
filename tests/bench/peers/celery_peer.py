"""Celery's harness (see harness.py): the Redis broker (kombu: a list per queue), no result
backend, the worker in one process with the thread pool, as many threads as the concurrency (one
process holding the whole concurrency, as for the other systems; prefork would need a process
per slot), without gossip, mingle and heartbeat (broadcast traffic a Redis broker does not
need). In this bench the thread pool drained twice as fast as the gevent pool (Celery's
suggestion for I/O-bound tasks), for both handlers; ``BENCH_CELERY_POOL=gevent`` runs gevent,
which patches the standard library before anything else is imported (``work`` does it first)."""

from __future__ import annotations

import os
import sys

POOL = os.environ.get("BENCH_CELERY_POOL", "threads")
if __name__ == "__main__" and sys.argv[1:2] == ["work"] and POOL == "gevent":
    from gevent import monkey

    monkey.patch_all()

import time  # noqa: E402 - after the patch

import redis  # noqa: E402
from celery import Celery  # noqa: E402
from harness import DONE, LAT, SLEEP_S, URL, args, paced, report  # noqa: E402

app = Celery("bench", broker=URL)
app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True)
r = redis.Redis.from_url(URL)  # the handlers' own client


@app.task(name="incr")
def incr() -> None:
    r.incr(DONE)


@app.task(name="sleep")
def sleep() -> None:
    time.sleep(SLEEP_S)
    r.incr(DONE)


@app.task(name="latency")
def latency(t_ns: int) -> None:
    lat = time.time_ns() - t_ns
    r.rpush(LAT, lat)


if __name__ == "__main__":
    ns = args()
    if ns.command == "work":
        app.worker_main(
            [
                "worker",
                f"--pool={POOL}",
                f"--concurrency={ns.concurrency}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
            ]
        )
    elif ns.kind == "latency":
        report({"enqueue_ns": paced(latency.delay, ns.n, ns.rate)})
    else:
        task = incr if ns.kind == "incr" else sleep
        t0 = time.perf_counter()
        for _ in range(ns.n):
            task.delay()
        report({"seconds": time.perf_counter() - t0})
