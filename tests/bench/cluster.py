"""``just bench --redis cluster``: how Redis work splits over a cluster's masters.

In one run, on servers this script starts itself: a drain of six queues by one worker process on
one Redis, then the same on a Redis Cluster of three masters. Reported per master: its share of
the tasks and its Redis CPU per task; and the worker's CPU per task on the cluster against one
Redis (the client pays for routing by slot). On a machine of two cores the cluster cannot raise
total throughput (the client is the bottleneck); what must show is that the Redis work splits
evenly by master, which is what scales on bigger machines.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import redis
from common import finished, process_cpu, start_worker, stop

from dtq_core import Client, TaskRequest
from dtq_core.infra.cluster import hash_slot
from dtq_core.ops.admin import Admin
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.topologies import RedisClusterSet

QUEUES = 6


def spread_names(owners: list[tuple[int, int, int]], count: int) -> list[str]:
    """``count`` queue names whose slots fall on the masters in turn (``owners``: slot
    ranges and their master's port), so each master serves the same number of queues."""
    ports = sorted({port for _, _, port in owners})
    wanted = {port: count // len(ports) for port in ports}
    names: list[str] = []
    for i in itertools.count():
        name = f"bench-{i}"
        slot = hash_slot(name)
        port = next(p for lo, hi, p in owners if lo <= slot <= hi)
        if wanted[port] > 0:
            wanted[port] -= 1
            names.append(name)
        if len(names) == count:
            return names
    raise AssertionError("unreachable")


def cpu_seconds(port: int) -> float:
    with redis.Redis(port=port) as r:
        info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def drain(url: str, ports: list[int], queues: list[str], n: int) -> dict[str, Any]:
    """Submit ``n`` no-op tasks spread over ``queues``, then one worker drains them all."""
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    reqs = [TaskRequest(task="noop", queue=queues[i % len(queues)]) for i in range(n)]
    t0 = time.perf_counter()
    for start in range(0, n, 2000):
        await client.enqueue_many(reqs[start : start + 2000])
    enqueue = n / (time.perf_counter() - t0)
    admin = Admin(client)
    for q in queues:
        await admin.pause(q)
    proc = start_worker(url, ",".join(queues))
    per = n // len(queues)
    try:
        await wait_until(lambda: client.redis.zcard(Keys().workers), timeout=30)
        worker0 = process_cpu(proc.pid)
        cpu0 = {p: cpu_seconds(p) for p in ports}
        t0 = time.perf_counter()
        for q in queues:
            await admin.resume(q)

        async def all_done() -> bool:
            for q in queues:
                if not await finished(client.redis, Keys().queue(q).events, per):
                    return False
            return True

        await wait_until(all_done, timeout=300, interval=0.2)
        span = time.perf_counter() - t0
        worker_us = (process_cpu(proc.pid) - worker0) / n * 1e6
        redis_s = {p: cpu_seconds(p) - cpu0[p] for p in ports}
    finally:
        stop(proc)
        await client.aclose()
    total = sum(redis_s.values())
    return {
        "enqueue_per_s": enqueue,
        "drain_per_s": n / span,
        "worker_cpu_us_per_task": worker_us,
        "redis_cpu_us_per_task": total / n * 1e6,
        "masters": {
            str(p): {"cpu_share": s / total if total else 0.0, "cpu_us_per_task": s / n * 1e6}
            for p, s in redis_s.items()
        },
        "busiest_over_fair": max(redis_s.values()) / (total / len(ports)) if total else 0.0,
    }


async def cluster_bench(folder: Path, n: int) -> dict[str, Any]:
    one = RedisServer(folder / "one")
    cluster = RedisClusterSet(folder / "cluster")
    one.start()
    cluster.start()
    try:
        with redis.Redis(port=cluster.nodes[0].port, decode_responses=True) as r:
            owners = [
                (int(s[0]), int(s[1]), int(s[2][1])) for s in r.execute_command("CLUSTER SLOTS")
            ]
        queues = spread_names(owners, QUEUES)
        ports = sorted({p for _, _, p in owners})
        standalone = await drain(one.url, [one.port], queues, n)
        on_cluster = await drain(cluster.url, ports, queues, n)
    finally:
        cluster.stop()
        one.stop()
    return {
        "queues": queues,
        "standalone": standalone,
        "cluster": on_cluster,
        "worker_cpu_cluster_over_standalone": on_cluster["worker_cpu_us_per_task"]
        / standalone["worker_cpu_us_per_task"],
    }


def cluster_table(res: dict[str, Any]) -> str:
    one, cl = res["standalone"], res["cluster"]
    rows = [
        ("figure", "one Redis", "cluster (3 masters)", "target"),
        ("enqueue_many", f"{one['enqueue_per_s']:,.0f}/s", f"{cl['enqueue_per_s']:,.0f}/s", ""),
        (
            f"drain, {QUEUES} queues, 1 worker",
            f"{one['drain_per_s']:,.0f}/s",
            f"{cl['drain_per_s']:,.0f}/s",
            "",
        ),
        (
            "Redis CPU per task (all masters)",
            f"{one['redis_cpu_us_per_task']:.1f} us",
            f"{cl['redis_cpu_us_per_task']:.1f} us",
            "",
        ),
        (
            "worker CPU per task",
            f"{one['worker_cpu_us_per_task']:.1f} us",
            f"{cl['worker_cpu_us_per_task']:.1f} us "
            f"({res['worker_cpu_cluster_over_standalone']:.2f}x)",
            "<= 1.3x",
        ),
        ("busiest master / fair share", "", f"{cl['busiest_over_fair']:.2f}x", "<= 1.3x"),
    ]
    for port, m in cl["masters"].items():
        rows.append(
            (
                f"  master :{port}",
                "",
                f"{m['cpu_share']:.0%} of Redis CPU, {m['cpu_us_per_task']:.1f} us/task",
                "",
            )
        )
    width = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in width))
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dtq-bench-cluster-") as tmp:
        print(cluster_table(asyncio.run(cluster_bench(Path(tmp), 12000))))
