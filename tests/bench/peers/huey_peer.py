"""huey's harness (see harness.py): ``RedisHuey`` (a list per queue, workers block on ``BRPOP``),
its consumer run in this process with thread workers, as many as the concurrency: in this bench
they drained 2.5 times as fast as greenlet workers (huey's suggestion for I/O-bound tasks), and
1.6 times for the sleeping handler. ``BENCH_HUEY_WORKER_TYPE=greenlet`` runs greenlets; they
need the standard library patched by gevent before anything else is imported, which ``work``
does first then."""

from __future__ import annotations

import os
import sys

WORKER_TYPE = os.environ.get("BENCH_HUEY_WORKER_TYPE", "thread")
if __name__ == "__main__" and sys.argv[1:2] == ["work"] and WORKER_TYPE == "greenlet":
    from gevent import monkey

    monkey.patch_all()

import time  # noqa: E402 - after the patch

import redis  # noqa: E402
from harness import DONE, LAT, SLEEP_S, URL, args, paced, report  # noqa: E402
from huey import RedisHuey  # noqa: E402

huey = RedisHuey("bench", url=URL)
r = redis.Redis.from_url(URL)  # the handlers' own client


@huey.task(name="incr")
def incr() -> None:
    r.incr(DONE)


@huey.task(name="sleep")
def sleep() -> None:
    time.sleep(SLEEP_S)
    r.incr(DONE)


@huey.task(name="latency")
def latency(t_ns: int) -> None:
    lat = time.time_ns() - t_ns
    r.rpush(LAT, lat)


if __name__ == "__main__":
    ns = args()
    if ns.command == "work":
        huey.create_consumer(workers=ns.concurrency, worker_type=WORKER_TYPE, periodic=False).run()
    elif ns.kind == "latency":
        report({"enqueue_ns": paced(latency, ns.n, ns.rate)})
    else:
        task = incr if ns.kind == "incr" else sleep
        t0 = time.perf_counter()
        for _ in range(ns.n):
            task()
        report({"seconds": time.perf_counter() - t0})
