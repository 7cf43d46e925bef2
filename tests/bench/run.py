"""dtq benchmark (``just bench``): throughput and latency against the raw Redis ceiling.

Every figure is measured in the same run as the ceiling, on a Redis server this script starts
itself, and reported as a ratio to it: absolute numbers on a shared machine are noisy.
Writes a table to stdout and the figures to ``.bench/results.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import connect
from dtq_core.ops.admin import Admin
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api import api_bench
from cluster import cluster_bench, cluster_table
from common import finished, process_cpu, start_worker, stop
from gateway import gateway_bench
from processes import processes_bench, processes_rows  # every core (--processes)
from workflows import workflow_bench

ROOT = Path(__file__).resolve().parents[2]


async def ceiling(url: str, n: int = 20000, batch: int = 500) -> dict[str, float]:
    """One Python process: pipelined XADD batches of 500; XREADGROUP COUNT 500 + XACK."""
    r = connect(url)
    await r.delete("ceiling")
    await r.xgroup_create("ceiling", "g", id="0", mkstream=True)
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        async with r.pipeline(transaction=False) as pipe:
            for _ in range(min(batch, n - start)):
                pipe.xadd("ceiling", {"t": "0123456789abcdef0123456789abcdef"})
            await pipe.execute()
    produce = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    done = 0
    while done < n:
        reply = await r.xreadgroup("g", "c", {"ceiling": ">"}, count=batch)
        ids = [eid for eid, _ in reply[0][1]]
        await r.xack("ceiling", "g", *ids)
        done += len(ids)
    consume = n / (time.perf_counter() - t0)
    await r.delete("ceiling")
    await r.aclose()
    return {
        "xadd_per_s": produce,
        "xreadgroup_xack_per_s": consume,
        # Both halves by one process, one after the other: what docs/performance.md calls the
        # ceiling of a produce-and-consume cycle.
        "cycle_per_s": n / (n / produce + n / consume),
    }


async def event_span(
    r: aioredis.Redis, events_key: str, first: str, last: str, count: int
) -> float:
    """Seconds from the first ``first`` event to the ``count``-th task in ``last`` events."""
    t_first = t_last = None
    seen = 0
    cursor = "-"
    while True:
        entries = await r.xrange(events_key, min=cursor, count=1000)
        if not entries:
            break
        for eid, fields in entries:
            ts = int(eid.split("-")[0]) / 1000
            if fields["type"] == first and t_first is None:
                t_first = ts
            if fields["type"] == last:
                seen += len(fields["ids"].split(","))
                if seen >= count and t_last is None:
                    t_last = ts
        cursor = "(" + entries[-1][0]
    if t_first is None or t_last is None:
        raise RuntimeError("lifecycle events missing")
    # Stream ids have millisecond resolution; one ms is added so a span is never zero.
    return t_last - t_first + 0.001


async def scenario_a(url: str, n: int, groups: int = 0, **limits: Any) -> dict[str, float]:
    """enqueue_many n no-op tasks, then one worker process drains them; ``limits``: queue
    limits set first (docs/flow-control.md), high enough never to hold a task back, so the
    run measures what checking them costs; ``groups``: the tasks spread over that many groups
    (docs/flow-control.md, "Groups"), round robin."""
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    if limits:
        await Admin(client).create_queue("bench-a")
        await Admin(client).configure("bench-a", **limits)
    reqs = [
        TaskRequest(task="noop", queue="bench-a", group=f"tenant-{i % groups}" if groups else None)
        for i in range(n)
    ]
    t0 = time.perf_counter()
    for start in range(0, n, 2000):
        await client.enqueue_many(reqs[start : start + 2000])
    enqueue = n / (time.perf_counter() - t0)
    events = Keys().queue("bench-a").events
    admin = Admin(client)
    # Start the worker on a paused queue, so its start-up is not counted in its CPU per task.
    await admin.pause("bench-a")
    proc = start_worker(url, "bench-a")
    try:
        await wait_until(lambda: client.redis.zcard(Keys().workers), timeout=30)
        worker_cpu0 = process_cpu(proc.pid)
        cpu0 = await redis_cpu(client.redis)
        await admin.resume("bench-a")
        await wait_until(lambda: finished(client.redis, events, n), timeout=300, interval=0.2)
        span = await event_span(client.redis, events, "task.started", "task.succeeded", n)
        redis_us = (await redis_cpu(client.redis) - cpu0) / n * 1e6
        worker_us = (process_cpu(proc.pid) - worker_cpu0) / n * 1e6
    finally:
        stop(proc)
        await client.aclose()
    return {
        "enqueue_per_s": enqueue,
        "drain_per_s": n / span,
        "redis_cpu_us_per_task": redis_us,
        "worker_cpu_us_per_task": worker_us,
    }


async def redis_cpu(r: aioredis.Redis) -> float:
    info = await r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def scenario_b(url: str, rate: float, seconds: float) -> dict[str, float]:
    """One task at a time at ``rate``/s to an idle worker: enqueue-to-start latency."""
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    proc = start_worker(url, "bench-b")
    try:
        await wait_until(lambda: client.redis.zcard(Keys().workers), timeout=30)
        n = int(rate * seconds)
        handles = []
        t0 = time.perf_counter()
        for i in range(n):
            handles.append(await client.enqueue("noop", queue="bench-b"))
            next_at = t0 + (i + 1) / rate
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        await wait_until(
            lambda: finished(client.redis, Keys().queue("bench-b").events, n), timeout=60
        )
        qk = Keys().queue("bench-b")
        async with client.redis.pipeline(transaction=False) as pipe:
            for h in handles:
                pipe.hmget(qk.task(h.id.split(":")[1]), ["ct", "sa"])
            rows = await pipe.execute()
    finally:
        stop(proc)
        await client.aclose()
    lat = sorted((int(sa) - int(ct)) / 1000 for ct, sa in rows)
    return {
        "p50_ms": statistics.median(lat),
        "p99_ms": lat[int(len(lat) * 0.99) - 1],
        "max_ms": lat[-1],
        "samples": len(lat),
    }


async def scenario_c(url: str, n: int) -> dict[str, float]:
    """n tasks of ``asyncio.sleep(0.01)`` at concurrency 100."""
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    reqs = [TaskRequest(task="sleep", args=[0.01], queue="bench-c") for _ in range(n)]
    await client.enqueue_many(reqs)
    events = Keys().queue("bench-c").events
    proc = start_worker(url, "bench-c", concurrency=100)
    try:
        await wait_until(lambda: finished(client.redis, events, n), timeout=120, interval=0.2)
        span = await event_span(client.redis, events, "task.started", "task.succeeded", n)
    finally:
        stop(proc)
        await client.aclose()
    return {"tasks_per_s": n / span, "of_physical_limit": n / span / 10000}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def queued_memory(url: str, queued: int, groups: int = 0) -> float:
    """Redis bytes per queued task (~100-byte args), spread over ``groups`` groups when given
    (then all but one task of each group wait in their group, with no stream entry)."""
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    # Create the queue's streams and groups first, so only per-task memory is measured.
    await client.enqueue_many([TaskRequest(task="noop", queue="bench-m")])
    before = (await client.redis.info("memory"))["used_memory"]
    arg = "x" * 96
    reqs = [
        TaskRequest(
            task="echo",
            args=[arg],
            queue="bench-m",
            group=f"tenant-{i % groups}" if groups else None,
        )
        for i in range(queued)
    ]
    for start in range(0, queued, 2000):
        await client.enqueue_many(reqs[start : start + 2000])
    after = (await client.redis.info("memory"))["used_memory"]
    await client.aclose()
    return (after - before) / queued


async def scenario_d(url: str, queued: int, drained: int) -> dict[str, float]:
    """Redis memory per queued task (~100-byte args) and worker RSS growth over many tasks."""
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    # Create the queue's streams and groups first, so only per-task memory is measured.
    await client.enqueue_many([TaskRequest(task="noop", queue="bench-d")])
    before = (await client.redis.info("memory"))["used_memory"]
    arg = "x" * 96
    reqs = [TaskRequest(task="echo", args=[arg], queue="bench-d") for _ in range(queued)]
    for start in range(0, queued, 2000):
        await client.enqueue_many(reqs[start : start + 2000])
    after = (await client.redis.info("memory"))["used_memory"]
    per_task = (after - before) / queued
    await client.redis.flushall()
    events = Keys().queue("bench-d2").events
    proc = start_worker(url, "bench-d2")
    try:
        warm = 10000
        await client.enqueue_many(
            [TaskRequest(task="noop", queue="bench-d2")] * 0
            + [TaskRequest(task="noop", queue="bench-d2") for _ in range(warm)]
        )
        await wait_until(lambda: finished(client.redis, events, warm), timeout=120, interval=0.2)
        rss_start = rss_kib(proc.pid)
        done = warm
        while done < drained:
            chunk = min(10000, drained - done)
            await client.enqueue_many(
                [TaskRequest(task="noop", queue="bench-d2") for _ in range(chunk)]
            )
            done += chunk
            await wait_until(
                lambda d=done: finished(client.redis, events, d), timeout=120, interval=0.2
            )
        rss_end = rss_kib(proc.pid)
    finally:
        stop(proc)
        await client.aclose()
    return {
        "redis_bytes_per_queued_task": per_task,
        "worker_rss_start_mib": rss_start / 1024,
        "worker_rss_growth_mib": (rss_end - rss_start) / 1024,
        "tasks_after_warmup": drained - warm,
    }


def table(results: dict[str, Any]) -> str:
    c = results["ceiling"]
    a, b, cc, d = results["A"], results["B"], results["C"], results["D"]
    al = results["A_limited"]
    g = results["G"]
    e, f = results["E"], results["F"]
    rows = [
        ("raw XADD (pipelined 500)", f"{c['xadd_per_s']:,.0f}/s", "ceiling", ""),
        ("raw XREADGROUP 500 + XACK", f"{c['xreadgroup_xack_per_s']:,.0f}/s", "ceiling", ""),
        (
            "A enqueue_many",
            f"{a['enqueue_per_s']:,.0f}/s",
            f"{a['enqueue_per_s'] / c['xadd_per_s']:.2f} x XADD",
            ">= 0.5",
        ),
        ("raw cycle: XADD, read, ack", f"{c['cycle_per_s']:,.0f}/s", "ceiling", ""),
        (
            "A drain, 1 worker",
            f"{a['drain_per_s']:,.0f}/s",
            f"{a['drain_per_s'] / c['cycle_per_s']:.2f} x cycle",
            ">= 0.30",
        ),
        ("A Redis CPU per task", f"{a['redis_cpu_us_per_task']:.1f} us", "claim+finish", ""),
        ("A worker CPU per task", f"{a['worker_cpu_us_per_task']:.1f} us", "", ""),
        (
            "A with concurrency and rate limits",
            f"{al['drain_per_s']:,.0f}/s",
            f"{al['drain_per_s'] / a['drain_per_s']:.2f} x A",
            "",
        ),
        (
            "A with limits: Redis CPU per task",
            f"{al['redis_cpu_us_per_task']:.1f} us",
            f"{al['redis_cpu_us_per_task'] / a['redis_cpu_us_per_task']:.2f} x A",
            "<= 1.3",
        ),
        (
            "G 1,000 groups, group_concurrency 5",
            f"{g['limited']['drain_per_s']:,.0f}/s",
            f"{g['limited']['drain_per_s'] / g['grouped']['drain_per_s']:.2f} x no limit",
            "",
        ),
        (
            "G group limit: Redis CPU per task",
            f"{g['limited']['redis_cpu_us_per_task']:.1f} us",
            f"{g['limited']['redis_cpu_us_per_task'] / g['grouped']['redis_cpu_us_per_task']:.2f}"
            " x no limit",
            "<= 1.3",
        ),
        (
            "G groups: Redis CPU per task",
            f"{g['grouped']['redis_cpu_us_per_task']:.1f} us",
            f"{g['grouped']['redis_cpu_us_per_task'] / g['plain']['redis_cpu_us_per_task']:.2f}"
            " x ungrouped",
            "",
        ),
        (
            "G Redis per waiting grouped task",
            f"{g['grouped_bytes']:,.0f} B",
            f"{g['grouped_bytes'] / g['plain_bytes']:.2f} x ungrouped",
            "<= 1.10",
        ),
        ("B enqueue->start p50", f"{b['p50_ms']:.2f} ms", "", ""),
        ("B enqueue->start p99", f"{b['p99_ms']:.2f} ms", "", "<= 2 ms"),
        ("B enqueue->start max", f"{b['max_ms']:.2f} ms", "", ""),
        (
            "C sleep(10ms) x C=100",
            f"{cc['tasks_per_s']:,.0f}/s",
            f"{cc['of_physical_limit']:.2f} of 10,000/s",
            ">= 0.80",
        ),
        ("D Redis per queued task", f"{d['redis_bytes_per_queued_task']:,.0f} B", "", "<= 1536 B"),
        (
            "D worker RSS growth",
            f"{d['worker_rss_growth_mib']:.1f} MiB",
            f"over {d['tasks_after_warmup']:,} tasks",
            "<= 10 MiB",
        ),
    ]
    if "skipped" in e:
        rows.append(("E REST submit", e["skipped"], "", ""))
    else:
        rows += [
            (
                "E POST /tasks, 50 conns",
                f"{e['single_requests_per_s']:,.0f}/s",
                "wrk",
                ">= 3,000/s",
            ),
            ("E POST /tasks p99", f"{e['single_p99_ms']:.1f} ms", "", "<= 50 ms"),
            (
                "E POST /tasks/batch",
                f"{e['batch_tasks_per_s']:,.0f} tasks/s",
                "1,000 a request",
                ">= 30,000/s",
            ),
        ]
    rows += [
        (
            "F gateway, 100 WS clients",
            f"{f['delivered_per_s']:,.0f} frames/s",
            f"{f['published_per_s']:,.0f} events/s",
            "2,000 events/s",
        ),
        (
            "F event delay p99",
            f"{f['p99_delay_ms']:.1f} ms",
            f"gaps {f['gaps']:.0f}",
            "<= 100 ms, 0 gaps",
        ),
    ]
    w = results["W"]
    rows += [
        (
            f"W chord of {w['members']:,}: submit",
            f"{w['chord_submit_s'] * 1000:.0f} ms",
            f"{w['chord_submit_s'] / w['plain_submit_s']:.2f} x enqueue_many",
            "< 1 s",
        ),
        (
            f"W chord of {w['members']:,}: to the callback",
            f"{w['chord_to_callback_s'] * 1000:.0f} ms",
            f"{w['chord_to_callback_s'] / w['plain_all_done_s']:.2f} x plain tasks",
            "",
        ),
        (
            f"W batch of {w['members']:,}: create and add",
            f"{w['batch_add_s'] * 1000:.0f} ms",
            f"{w['batch_add_s'] / w['plain_submit_s']:.2f} x enqueue_many",
            "< 1 s",
        ),
        (
            f"W batch of {w['members']:,}: to on_complete",
            f"{w['batch_to_callback_s'] * 1000:.0f} ms",
            f"{w['batch_to_callback_s'] / w['chord_to_callback_s']:.2f} x the chord",
            "",
        ),
        (
            f"W chain of {w['steps']}: per step",
            f"{w['chain_per_step_ms']:.2f} ms",
            f"{w['chain_per_step_ms'] / w['plain_task_round_trip_ms']:.2f} x one task",
            "",
        ),
    ]
    # -- every core (tests/bench/processes.py) --
    if "P" in results:
        rows += processes_rows(results["P"])
    width = [max(len(r[i]) for r in rows) for i in range(4)]
    head = ("figure", "value", "ratio", "target")
    width = [max(w, len(h)) for w, h in zip(width, head, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, width, strict=True))]
    lines.append("  ".join("-" * w for w in width))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)) for r in rows]
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.redis == "cluster":
        with tempfile.TemporaryDirectory(prefix="dtq-bench-cluster-") as tmp:
            return {"cluster": await cluster_bench(Path(tmp), args.tasks)}
    with tempfile.TemporaryDirectory(prefix="dtq-bench-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            url = server.url
            results: dict[str, Any] = {"ceiling": await ceiling(url)}
            results["A"] = await scenario_a(url, args.tasks)
            results["A_limited"] = await scenario_a(
                url, args.tasks, concurrency=100_000, rate="1000000/s"
            )
            results["G"] = {
                # The same tasks in the same run: no groups and no limits, then 1,000 groups
                # under a group limit.
                "plain": await scenario_a(url, args.tasks),
                "grouped": await scenario_a(url, args.tasks, groups=1000),
                "limited": await scenario_a(url, args.tasks, groups=1000, group_concurrency=5),
                "plain_bytes": await queued_memory(url, 20000),
                "grouped_bytes": await queued_memory(url, 20000, groups=1000),
            }
            results["B"] = await scenario_b(url, 200, args.latency_seconds)
            results["C"] = await scenario_c(url, 5000)
            results["D"] = await scenario_d(url, 20000, args.rss_tasks)
            await connect(url).flushall()
            results["E"] = await asyncio.to_thread(api_bench, url, args.api_seconds)
            results["F"] = await gateway_bench(url)
            results["W"] = await workflow_bench(url)
            # -- every core (tests/bench/processes.py): CPU-bound scaling, --processes 2 drain --
            results["P"] = await processes_bench(url, repeats=args.process_repeats)
        finally:
            server.stop()
    results["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--rss-tasks", type=int, default=100000)
    parser.add_argument("--api-seconds", type=int, default=10)
    parser.add_argument(
        "--redis",
        choices=("standalone", "cluster"),
        default="standalone",
        help="standalone: every scenario on one Redis; cluster: a drain of 6 queues on one "
        "Redis and on a 3-master Redis Cluster, Redis CPU per master",
    )
    parser.add_argument(
        "--process-repeats",
        type=int,
        default=1,
        help="repeats of the every-core scenario (tests/bench/processes.py; 3 when run alone)",
    )
    parser.add_argument("--out", default="")
    ns = parser.parse_args()
    res = asyncio.run(main(ns))
    results_ns = res.get("cluster")
    sys.stdout.write((cluster_table(results_ns) if results_ns else table(res)) + "\n")
    default_out = "cluster.json" if results_ns else "results.json"
    out = Path(ns.out or ROOT / ".bench" / default_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    sys.stdout.write(f"\nfigures written to {out}\n")
