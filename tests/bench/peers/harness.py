"""The command line every Python harness of ``just bench --peers`` shares (standard library only:
it runs in each peer's own virtualenv under ``.bench/``, where dtq is not installed).

A harness is one file per system (``dtq_peer.py``, ``huey_peer.py``, ...) that defines the three
handlers every system runs, written with that system's public API, and calls :func:`main`:

- ``incr``: one Redis round trip through the handler's own client (``INCR bench:done``);
- ``sleep``: ``sleep(0.01)``, then the same ``INCR``;
- ``latency(t_ns)``: at its first line, ``time.time_ns() - t_ns`` (the producer took ``t_ns``
  just before its enqueue call; one host, one clock), pushed onto ``bench:lat`` by its one Redis
  round trip.

Commands (the bench in ``tests/bench/users.py`` runs them and measures from Redis):

- ``produce --kind incr|sleep --n N``: enqueue N tasks as fast as the system's producer API
  allows (its bulk call where it has one), then exit;
- ``produce --kind latency --n N --rate R``: one ``latency`` task at a time, R a second, each
  carrying the time taken just before its enqueue call; prints the enqueue calls' durations;
- ``work --concurrency C``: run one worker process until SIGTERM.

``produce`` prints one JSON object on its last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

DONE = "bench:done"
LAT = "bench:lat"
SLEEP_S = 0.01
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "50"))
"""The worker's concurrency, for harnesses whose worker reads it at import."""


def args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=("produce", "work", "alone", "ping"))
    parser.add_argument("--kind", choices=("incr", "sleep", "latency"), default="incr")
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    return parser.parse_args()


def report(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def paced(send: Callable[[int], object], n: int, rate: float) -> list[int]:
    """Call ``send(t_ns)`` n times, ``rate`` a second (sync producers); the calls' durations."""
    durations = []
    start = time.perf_counter()
    for i in range(n):
        t_ns = time.time_ns()
        send(t_ns)
        durations.append(time.time_ns() - t_ns)
        time.sleep(max(0.0, start + (i + 1) / rate - time.perf_counter()))
    return durations


async def paced_async(send: Callable[[int], Awaitable[object]], n: int, rate: float) -> list[int]:
    """:func:`paced` for async producers."""
    durations = []
    start = time.perf_counter()
    for i in range(n):
        t_ns = time.time_ns()
        await send(t_ns)
        durations.append(time.time_ns() - t_ns)
        await asyncio.sleep(max(0.0, start + (i + 1) / rate - time.perf_counter()))
    return durations


async def gathered(send: Callable[[], Awaitable[object]], n: int, window: int = 200) -> None:
    """Enqueue n tasks with ``window`` enqueue calls in flight (async producers without a bulk
    call)."""
    for start in range(0, n, window):
        await asyncio.gather(*(send() for _ in range(min(window, n - start))))
