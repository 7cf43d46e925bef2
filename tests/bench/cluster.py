"""``just bench --redis cluster``: how Redis work splits over a cluster's masters.

In one run, on servers this script starts itself, one worker process drains in turn:

- six queues, on one Redis and then on a Redis Cluster of three masters;
- one queue, on one Redis; the same queue split into six partitions, on one Redis and on the
  cluster (docs/scaling.md, "Partitioned queues");
- on the cluster, a queue named ``hot`` split into six partitions, wherever its names fall.

Reported per master: its partitions, its share of the tasks and of the Redis CPU, and its Redis
CPU per task it ran; the busiest master's load over its fair share (a third), by Redis CPU and
by tasks; and the worker's CPU per task on the cluster against one Redis (the client pays for
routing by slot). On a machine of two cores the cluster cannot raise total throughput (the
client is the bottleneck); what must show is that the Redis work splits evenly by master, which
is what scales on bigger machines.

Why the partitioned queue's name is searched for: a partition's slot is decided by its stored
name (``hot``, ``hot~1`` .. ``hot~5``, each its own hash tag), so with six partitions on three
masters an unlucky name puts 3/2/1 partitions on them, and the busiest master then does half
the work (1.5x its fair share) however evenly the tasks spread over the partitions. The even
run takes the first name whose six partitions fall two on each master; the ``hot`` run shows
the unlucky case as a user would meet it (``CLUSTER KEYSLOT`` tells where a name falls; more
partitions than masters evens it out on average).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from common import finished_count, process_cpu, start_worker, stop

from dtq_core import Client, TaskRequest
from dtq_core.infra.cluster import hash_slot
from dtq_core.names import partition_name
from dtq_core.ops.admin import Admin
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.topologies import RedisClusterSet

QUEUES = 6
PARTITIONS = 6
AS_IT_FALLS = "hot"
"""The partitioned queue's name taken as it comes (3/2/1 partitions on a default 3-master
layout of the slots)."""

Owners = list[tuple[int, int, int]]
"""Slot ranges and their master's port: ``(first slot, last slot, port)``."""


def master_of(owners: Owners, name: str) -> int:
    """The port of the master serving the stored queue ``name`` (its keys' hash tag)."""
    slot = hash_slot(name)
    return next(p for lo, hi, p in owners if lo <= slot <= hi)


def masters(owners: Owners) -> list[int]:
    return sorted({port for _, _, port in owners})


def spread_names(owners: Owners, count: int) -> list[str]:
    """``count`` queue names whose slots fall on the masters in turn, so each master serves
    the same number of queues."""
    wanted = dict.fromkeys(masters(owners), count // len(masters(owners)))
    names: list[str] = []
    for i in itertools.count():
        name = f"bench-{i}"
        port = master_of(owners, name)
        if wanted[port] > 0:
            wanted[port] -= 1
            names.append(name)
        if len(names) == count:
            return names
    raise AssertionError("unreachable")


def partitions_by_master(owners: Owners, queue: str, partitions: int) -> dict[int, int]:
    """How many of ``queue``'s ``partitions`` each master serves."""
    counts = dict.fromkeys(masters(owners), 0)
    for k in range(partitions):
        counts[master_of(owners, partition_name(queue, k))] += 1
    return counts


def spread_partitions(owners: Owners, partitions: int) -> str:
    """A queue name whose ``partitions`` stored names fall evenly on the masters
    (``partitions`` a multiple of the masters)."""
    even = partitions // len(masters(owners))
    for i in itertools.count():
        name = f"hot-{i}"
        if set(partitions_by_master(owners, name, partitions).values()) == {even}:
            return name
    raise AssertionError("unreachable")


def cpu_seconds(port: int) -> float:
    with redis.Redis(port=port) as r:
        info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@dataclass(frozen=True, slots=True)
class Workload:
    """What one drain submits and serves: tasks round-robin over ``queues``, each queue split
    into ``partitions`` (the producer spreads them over the partitions in turn)."""

    queues: tuple[str, ...]
    partitions: int = 1

    @property
    def stored(self) -> list[str]:
        """The stored queues the tasks land in."""
        return [partition_name(q, k) for q in self.queues for k in range(self.partitions)]


async def drain(url: str, owners: Owners, work: Workload, n: int) -> dict[str, Any]:
    """Submit ``n`` no-op tasks as ``work`` says, then one worker drains them all."""
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    admin = Admin(client)
    if work.partitions > 1:
        for q in work.queues:
            await admin.create_queue(q)
            await admin.configure(q, partitions=work.partitions)
    reqs = [TaskRequest(task="noop", queue=work.queues[i % len(work.queues)]) for i in range(n)]
    t0 = time.perf_counter()
    for start in range(0, n, 2000):
        await client.enqueue_many(reqs[start : start + 2000])
    enqueue = n / (time.perf_counter() - t0)
    for q in work.queues:
        await admin.pause(q)
    proc = start_worker(url, ",".join(work.queues))
    ports = masters(owners)
    events = {name: Keys().queue(name).events for name in work.stored}

    async def ended() -> dict[str, int]:
        return {name: await finished_count(client.redis, key) for name, key in events.items()}

    async def all_done() -> bool:
        return sum((await ended()).values()) >= n

    try:
        await wait_until(lambda: client.redis.zcard(Keys().workers), timeout=30)
        worker0 = process_cpu(proc.pid)
        cpu0 = {p: cpu_seconds(p) for p in ports}
        t0 = time.perf_counter()
        for q in work.queues:
            await admin.resume(q)
        await wait_until(all_done, timeout=300, interval=0.2)
        span = time.perf_counter() - t0
        worker_us = (process_cpu(proc.pid) - worker0) / n * 1e6
        redis_s = {p: cpu_seconds(p) - cpu0[p] for p in ports}
        by_name = await ended()
    finally:
        stop(proc)
        await client.aclose()
    tasks = dict.fromkeys(ports, 0)
    stored = dict.fromkeys(ports, 0)
    for name, count in by_name.items():
        tasks[master_of(owners, name)] += count
        stored[master_of(owners, name)] += 1
    total = sum(redis_s.values())
    fair_cpu = total / len(ports)
    return {
        "tasks_by_stored_queue": by_name,
        "enqueue_per_s": enqueue,
        "drain_per_s": n / span,
        "worker_cpu_us_per_task": worker_us,
        "redis_cpu_us_per_task": total / n * 1e6,
        "masters": {
            str(p): {
                "stored_queues": stored[p],
                "task_share": tasks[p] / n,
                "cpu_share": s / total if total else 0.0,
                "cpu_us_per_task": s / n * 1e6,
                "cpu_us_per_own_task": s / tasks[p] * 1e6 if tasks[p] else 0.0,
            }
            for p, s in redis_s.items()
        },
        "busiest_over_fair": max(redis_s.values()) / fair_cpu if total else 0.0,
        "busiest_over_fair_tasks": max(tasks.values()) / (n / len(ports)),
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
        single: Owners = [(0, 16383, one.port)]
        queues = tuple(spread_names(owners, QUEUES))
        hot = spread_partitions(owners, PARTITIONS)
        runs = {
            "standalone": await drain(one.url, single, Workload(queues), n),
            "cluster": await drain(cluster.url, owners, Workload(queues), n),
            "standalone_one_queue": await drain(one.url, single, Workload((hot,)), n),
            "standalone_partitioned": await drain(one.url, single, Workload((hot,), PARTITIONS), n),
            "cluster_partitioned": await drain(
                cluster.url, owners, Workload((hot,), PARTITIONS), n
            ),
            "cluster_as_it_falls": await drain(
                cluster.url, owners, Workload((AS_IT_FALLS,), PARTITIONS), n
            ),
        }
    finally:
        cluster.stop()
        one.stop()
    base = runs["standalone_one_queue"]["worker_cpu_us_per_task"]
    return {
        "tasks": n,
        "queues": list(queues),
        "partitioned_queue": hot,
        "as_it_falls_queue": AS_IT_FALLS,
        "as_it_falls_partitions_by_master": {
            str(p): c for p, c in partitions_by_master(owners, AS_IT_FALLS, PARTITIONS).items()
        },
        **runs,
        "worker_cpu_cluster_over_standalone": runs["cluster"]["worker_cpu_us_per_task"]
        / runs["standalone"]["worker_cpu_us_per_task"],
        "worker_cpu_partitioned_over_one_queue": runs["cluster_partitioned"][
            "worker_cpu_us_per_task"
        ]
        / base,
        "worker_cpu_as_it_falls_over_one_queue": runs["cluster_as_it_falls"][
            "worker_cpu_us_per_task"
        ]
        / base,
    }


Row = tuple[str, str, str, str]


def _drain_rows(
    label: str, one: dict[str, Any] | None, cl: dict[str, Any], ratio: float
) -> list[Row]:
    """One workload's rows: ``one`` on one Redis (``None``: not run there), ``cl`` on the
    cluster, ``ratio`` the cluster's worker CPU per task over the one-Redis baseline."""

    def on_one(fmt: str, key: str) -> str:
        return fmt.format(one[key]) if one else ""

    rows: list[Row] = [
        ("enqueue_many", on_one("{:,.0f}/s", "enqueue_per_s"), f"{cl['enqueue_per_s']:,.0f}/s", ""),
        (
            f"drain, {label}, 1 worker",
            on_one("{:,.0f}/s", "drain_per_s"),
            f"{cl['drain_per_s']:,.0f}/s",
            "",
        ),
        (
            "Redis CPU per task (all masters)",
            on_one("{:.1f} us", "redis_cpu_us_per_task"),
            f"{cl['redis_cpu_us_per_task']:.1f} us",
            "",
        ),
        (
            "worker CPU per task",
            on_one("{:.1f} us", "worker_cpu_us_per_task"),
            f"{cl['worker_cpu_us_per_task']:.1f} us ({ratio:.2f}x)",
            "<= 1.3x",
        ),
        ("busiest master / fair share, CPU", "", f"{cl['busiest_over_fair']:.2f}x", "<= 1.3x"),
        ("busiest master / fair share, tasks", "", f"{cl['busiest_over_fair_tasks']:.2f}x", ""),
    ]
    for port, m in cl["masters"].items():
        rows.append(
            (
                f"  master :{port} ({m['stored_queues']} stored queues)",
                "",
                f"{m['task_share']:.0%} of tasks, {m['cpu_share']:.0%} of Redis CPU, "
                f"{m['cpu_us_per_own_task']:.1f} us/task it ran",
                "",
            )
        )
    return rows


def cluster_table(res: dict[str, Any]) -> str:
    hot, falls = res["partitioned_queue"], res["as_it_falls_queue"]
    spread = "/".join(str(c) for c in res["as_it_falls_partitions_by_master"].values())
    one_part = res["standalone_partitioned"]
    groups: list[tuple[str, list[Row]]] = [
        (
            f"{QUEUES} queues",
            _drain_rows(
                f"{QUEUES} queues",
                res["standalone"],
                res["cluster"],
                res["worker_cpu_cluster_over_standalone"],
            ),
        ),
        (
            f"queue {hot!r}: one queue on one Redis; {PARTITIONS} partitions, 2 per master, "
            "on the cluster",
            [
                *_drain_rows(
                    f"1 queue / {PARTITIONS} partitions",
                    res["standalone_one_queue"],
                    res["cluster_partitioned"],
                    res["worker_cpu_partitioned_over_one_queue"],
                ),
                (
                    f"  {PARTITIONS} partitions on one Redis",
                    f"{one_part['drain_per_s']:,.0f}/s, "
                    f"worker {one_part['worker_cpu_us_per_task']:.1f} us, "
                    f"Redis {one_part['redis_cpu_us_per_task']:.1f} us",
                    "",
                    "",
                ),
            ],
        ),
        (
            f"queue {falls!r}: {PARTITIONS} partitions as its names fall ({spread} per master); "
            "worker CPU against the one-queue drain above",
            _drain_rows(
                f"{PARTITIONS} partitions",
                None,
                res["cluster_as_it_falls"],
                res["worker_cpu_as_it_falls_over_one_queue"],
            ),
        ),
    ]
    head: Row = ("figure", "one Redis", "cluster (3 masters)", "target")
    every = [head, *(r for _, rows in groups for r in rows)]
    width = [max(len(r[i]) for r in every) for i in range(4)]

    def line(r: Row) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)).rstrip()

    lines = [line(head), "  ".join("-" * w for w in width)]
    for title, rows in groups:
        lines += [f"[{title}]", *(line(r) for r in rows)]
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dtq-bench-cluster-") as tmp:
        print(cluster_table(asyncio.run(cluster_bench(Path(tmp), 12000))))
