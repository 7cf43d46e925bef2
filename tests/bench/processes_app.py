"""The handlers of the "every core" benchmark (``tests/bench/processes.py``): the worker runs
``--app processes_app:registry`` (or ``:in_processes``) with this folder on ``PYTHONPATH``.

- ``spin``: a pure-Python loop of ``n`` rounds in an ``async def`` (it holds its worker
  process's event loop: what ``--processes`` spreads over cores). A fixed amount of work, not
  of time: on a shared host a loop timed by the clock would finish on time with less done;
- ``spin_process``: the same loop in a plain ``def`` with ``executor="process"`` (a handler
  process of the worker's pool runs it);
- ``incr``: one Redis round trip through the handler's own client (``INCR bench:done``), the
  handler of the one-Redis-call drain that every peer runs too.
"""

from __future__ import annotations

import os
import time

import redis.asyncio as aioredis

from dtq_core import TaskRegistry

DONE = "bench:done"
registry = TaskRegistry()
in_processes = TaskRegistry()
"""``spin_process`` alone: a worker of ``registry`` starts no handler process."""
_redis: aioredis.Redis | None = None


def work(n: int) -> int:
    """``n`` rounds of arithmetic (the benchmark sizes ``n`` to about 5 ms of CPU)."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def rounds_per_ms(sample: int = 200_000) -> float:
    """How many rounds of :func:`work` one millisecond of this process's CPU does."""
    t0 = time.process_time()
    work(sample)
    return sample / max(1e-6, (time.process_time() - t0) * 1000)


@registry.task(name="spin", queue="bench-cpu")
async def spin(n: int) -> None:
    work(n)


@in_processes.task(name="spin_process", queue="bench-cpu", executor="process")
def spin_process(n: int) -> None:
    work(n)


@registry.task(name="incr", queue="bench")
async def incr() -> None:
    global _redis  # noqa: PLW0603 - one client per worker process, as a user's handler makes it
    if _redis is None:
        _redis = aioredis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    await _redis.incr(DONE)
