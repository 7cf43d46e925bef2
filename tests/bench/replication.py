"""What ``DTQ_REDIS_WAIT_REPLICAS=1`` costs a submit, on a master with one local replica.

``uv run --all-packages python tests/bench/replication.py``: SDK ``enqueue`` one at a time
(latency per submit, client CPU per submit) and ``enqueue_many`` in batches of 500 (tasks a
second), each with WAIT off and on, in alternating rounds on the same servers so that the
machine's noise falls on both alike. Writes a table to stdout and the figures to
``.bench/replication.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import load_settings
from dtq_devtools.testing.topologies import ReplicaSet

ROOT = Path(__file__).resolve().parents[2]
BATCH = 500


async def one_round(url: str, wait: int, singles: int, batches: int) -> dict[str, float]:
    settings = load_settings(
        {}, redis_url=url, redis_wait_replicas=wait, max_queue_depth=0, reject_unknown_queues=False
    )
    async with Client(connect(settings), settings, owns_redis=True) as client:
        await client.enqueue("noop", queue="bench-wait")  # the queue registered, the pool warm
        latencies: list[float] = []
        cpu0 = time.process_time()
        for _ in range(singles):
            t0 = time.perf_counter()
            await client.enqueue("noop", queue="bench-wait")
            latencies.append(time.perf_counter() - t0)
        cpu = time.process_time() - cpu0
        reqs = [TaskRequest(task="noop", queue="bench-wait") for _ in range(BATCH)]
        t0 = time.perf_counter()
        for _ in range(batches):
            await client.enqueue_many(reqs)
        many = batches * BATCH / (time.perf_counter() - t0)
        await client.redis.flushall()
    latencies.sort()
    return {
        "enqueue_us_p50": latencies[len(latencies) // 2] * 1e6,
        "enqueue_us_p99": latencies[int(len(latencies) * 0.99)] * 1e6,
        "enqueue_per_s": singles / sum(latencies),
        "client_cpu_us_per_enqueue": cpu / singles * 1e6,
        "enqueue_many_per_s": many,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    rounds: dict[int, list[dict[str, float]]] = {0: [], 1: []}
    with tempfile.TemporaryDirectory(prefix="dtq-bench-wait-") as tmp:
        replicas = ReplicaSet(Path(tmp))
        replicas.start()
        try:
            for _ in range(args.rounds):
                for wait in (0, 1):
                    rounds[wait].append(
                        await one_round(replicas.url, wait, args.singles, args.batches)
                    )
        finally:
            replicas.stop()
    medians = {
        f"wait_{wait}": {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        for wait, runs in rounds.items()
    }
    return {"rounds": args.rounds, "singles": args.singles, "batch": BATCH, **medians}


def table(res: dict[str, Any]) -> str:
    off, on = res["wait_0"], res["wait_1"]
    rows = [f"{'figure (median of rounds)':32} {'WAIT 0':>10} {'WAIT 1':>10} {'ratio':>7}"]
    for key in off:
        rows.append(f"{key:32} {off[key]:10.1f} {on[key]:10.1f} {on[key] / off[key]:7.2f}")
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--singles", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / ".bench" / "replication.json"))
    ns = parser.parse_args()
    res = asyncio.run(main(ns))
    sys.stdout.write(table(res) + "\n")
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    sys.stdout.write(f"\nfigures written to {out}\n")
