"""dtq benchmark (``just bench``): throughput and latency as users see them, against the raw
Redis ceilings and, with ``--peers``, against BullMQ, huey, taskiq, arq and Celery.

Every figure is measured in the same run as the ceilings, on a Redis server this script starts
itself, and read beside them: absolute numbers on a shared machine are noisy. Prints a line as
each scenario ends and two tables at the end (dtq against its ceilings and targets; every system
side by side with the ratio dtq / best peer); writes the figures to
``.bench/results/<time>.json``, the comparison as Markdown beside it and, with ``--peers``, the
chart of the ratios as SVG (docs/performance.md explains every figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import connect
from dtq_core.infra.log import configure_logging
from dtq_core.ops.admin import Admin
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api import api_bench
from chart import ratios_svg
from cluster import cluster_bench, cluster_table
from common import finished, process_cpu, start_worker, stop
from gateway import gateway_bench
from processes import processes_bench, processes_rows  # every core (--processes)
from users import (
    PEERS,
    Sizes,
    compare,
    comparison_table,
    dtq_system,
    install_peers,
    ratio_rows,
    say,
)
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


def _ratio(value: float, base: float, what: str) -> str:
    return f"{value / base:.2f} x {what}" if base else ""


def table(results: dict[str, Any], markdown: bool = False) -> str:
    c, a, d = results["ceiling"], results["A"], results["D"]
    med = results["users"]["medians"]
    r = {k: v["median"] for k, v in med["redis_drain"]["dtq"].items()}
    b = med["latency"]["dtq"]
    bm = {k: v["median"] for k, v in b.items() if k != "redis_side"}
    split = {k: v["median"] for k, v in b["redis_side"].items()}
    cc = med["sleep_drain"]["dtq"]["per_s"]["median"]
    alone = med["handler_alone"]["dtq"]["per_s"]["median"]
    ping = {k: v["median"] for k, v in med["enqueue_vs_ping"]["dtq"].items()}
    conc = results["users"]["sizes"]["concurrency"]
    rows = [
        ("raw XADD (pipelined 500)", f"{c['xadd_per_s']:,.0f}/s", "ceiling", ""),
        ("raw XREADGROUP 500 + XACK", f"{c['xreadgroup_xack_per_s']:,.0f}/s", "ceiling", ""),
        ("raw cycle: XADD, read, ack", f"{c['cycle_per_s']:,.0f}/s", "ceiling", ""),
        (
            f"handler alone: INCR, C={conc}, no queue",
            f"{alone:,.0f}/s",
            "ceiling of R",
            "",
        ),
        ("PING round trip, SDK connection, p50", f"{ping['ping_us_p50']:.0f} us", "ceiling", ""),
        (
            "A enqueue_many",
            f"{a['enqueue_per_s']:,.0f}/s",
            _ratio(a["enqueue_per_s"], c["xadd_per_s"], "XADD"),
            ">= 0.5",
        ),
        (
            "A drain of no-op tasks, 1 worker",
            f"{a['drain_per_s']:,.0f}/s",
            _ratio(a["drain_per_s"], c["cycle_per_s"], "cycle"),
            ">= 0.30",
        ),
        ("A Redis CPU per drained task", f"{a['redis_cpu_us_per_task']:.1f} us", "", ""),
        ("A worker CPU per no-op task", f"{a['worker_cpu_us_per_task']:.1f} us", "", ""),
    ]
    if "A_limited" in results:
        al, g = results["A_limited"], results["G"]
        gl, gg, gp = g["limited"], g["grouped"], g["plain"]
        rows += [
            (
                "A with concurrency and rate limits",
                f"{al['drain_per_s']:,.0f}/s",
                _ratio(al["drain_per_s"], a["drain_per_s"], "A"),
                "",
            ),
            (
                "A with limits: Redis CPU per task",
                f"{al['redis_cpu_us_per_task']:.1f} us",
                _ratio(al["redis_cpu_us_per_task"], a["redis_cpu_us_per_task"], "A"),
                "<= 1.3",
            ),
            (
                "G 1,000 groups, group_concurrency 5",
                f"{gl['drain_per_s']:,.0f}/s",
                _ratio(gl["drain_per_s"], gg["drain_per_s"], "no limit"),
                "",
            ),
            (
                "G group limit: Redis CPU per task",
                f"{gl['redis_cpu_us_per_task']:.1f} us",
                _ratio(gl["redis_cpu_us_per_task"], gg["redis_cpu_us_per_task"], "no limit"),
                "<= 1.3",
            ),
            (
                "G groups: Redis CPU per task",
                f"{gg['redis_cpu_us_per_task']:.1f} us",
                _ratio(gg["redis_cpu_us_per_task"], gp["redis_cpu_us_per_task"], "ungrouped"),
                "",
            ),
            (
                "G Redis per waiting grouped task",
                f"{g['grouped_bytes']:,.0f} B",
                _ratio(g["grouped_bytes"], g["plain_bytes"], "ungrouped"),
                "<= 1.10",
            ),
        ]
    rows += [
        (
            f"R drain, handler with one Redis call, C={conc}",
            f"{r['per_s']:,.0f}/s",
            _ratio(r["per_s"], alone, "handler alone"),
            "",
        ),
        ("R Redis CPU per task", f"{r['redis_cpu_us_per_task']:.0f} us", "incl. the INCR", ""),
        ("R worker CPU per task", f"{r['worker_cpu_us_per_task']:.0f} us", "", ""),
        ("B enqueue->start as users see it, p50", f"{bm['p50_ms']:.2f} ms", "200/s, idle", ""),
        ("B enqueue->start p99", f"{bm['p99_ms']:.2f} ms", "", ""),
        ("B enqueue->start max", f"{bm['max_ms']:.2f} ms", "", ""),
        ("B of it in Redis (ct -> sa), p50", f"{split['p50_ms']:.2f} ms", "diagnostic", ""),
        ("B of it in Redis (ct -> sa), p99", f"{split['p99_ms']:.2f} ms", "diagnostic", "<= 2 ms"),
        (
            "one enqueue call, p50 (same connection)",
            f"{ping['enqueue_us_p50']:.0f} us",
            _ratio(ping["enqueue_us_p50"], ping["ping_us_p50"], "PING"),
            "",
        ),
        (
            "C sleep(10 ms) + one Redis call, C=100",
            f"{cc:,.0f}/s",
            f"{cc / 10000:.2f} of 10,000/s",
            ">= 0.80",
        ),
        (
            "D Redis per queued task (~100 B args)",
            f"{d['redis_bytes_per_queued_task']:,.0f} B",
            "",
            "<= 1536 B",
        ),
        (
            "D worker RSS growth",
            f"{d['worker_rss_growth_mib']:.1f} MiB",
            f"over {d['tasks_after_warmup']:,} tasks",
            "<= 10 MiB",
        ),
        ("D worker RSS after the R drain", f"{r['worker_rss_mib']:.0f} MiB", "", ""),
    ]
    rows += _service_rows(results)
    # -- every core (tests/bench/processes.py) --
    if "P" in results:
        rows += processes_rows(results["P"])
    head = ("figure", "value", "ratio", "target")
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|---|---|---|---|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    width = [max(len(row[i]) for row in rows) for i in range(4)]
    width = [max(w, len(h)) for w, h in zip(width, head, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, width, strict=True))]
    lines.append("  ".join("-" * w for w in width))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, width, strict=True)) for row in rows]
    return "\n".join(lines)


def _service_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """E (REST submits), F (the event gateway) and W (workflows), when they ran."""
    rows: list[tuple[str, str, str, str]] = []
    if "E" not in results:
        return rows
    c, e, f, w = results["ceiling"], results["E"], results["F"], results["W"]
    if "skipped" in e:
        rows.append(("E REST submit", e["skipped"], "", ""))
    else:
        rows += [
            (
                "E POST /tasks, 50 conns",
                f"{e['single_requests_per_s']:,.0f}/s",
                _ratio(e["single_requests_per_s"], c["xadd_per_s"], "XADD"),
                ">= 3,000/s",
            ),
            ("E POST /tasks p99", f"{e['single_p99_ms']:.1f} ms", "", "<= 50 ms"),
            (
                "E POST /tasks/batch",
                f"{e['batch_tasks_per_s']:,.0f} tasks/s",
                _ratio(e["batch_tasks_per_s"], c["xadd_per_s"], "XADD"),
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
        (
            f"W chord of {w['members']:,}: submit",
            f"{w['chord_submit_s'] * 1000:.0f} ms",
            _ratio(w["chord_submit_s"], w["plain_submit_s"], "enqueue_many"),
            "< 1 s",
        ),
        (
            f"W chord of {w['members']:,}: to the callback",
            f"{w['chord_to_callback_s'] * 1000:.0f} ms",
            _ratio(w["chord_to_callback_s"], w["plain_all_done_s"], "plain tasks"),
            "",
        ),
        (
            f"W batch of {w['members']:,}: create and add",
            f"{w['batch_add_s'] * 1000:.0f} ms",
            _ratio(w["batch_add_s"], w["plain_submit_s"], "enqueue_many"),
            "< 1 s",
        ),
        (
            f"W batch of {w['members']:,}: to on_complete",
            f"{w['batch_to_callback_s'] * 1000:.0f} ms",
            _ratio(w["batch_to_callback_s"], w["chord_to_callback_s"], "the chord"),
            "",
        ),
        (
            f"W chain of {w['steps']}: per step",
            f"{w['chain_per_step_ms']:.2f} ms",
            _ratio(w["chain_per_step_ms"], w["plain_task_round_trip_ms"], "one task"),
            "",
        ),
    ]
    return rows


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.redis == "cluster":
        with tempfile.TemporaryDirectory(prefix="dtq-bench-cluster-") as tmp:
            return {"cluster": await cluster_bench(Path(tmp), args.tasks)}
    quick = args.quick
    sizes = Sizes(
        drain_tasks=args.tasks,
        sleep_tasks=1000 if quick else 5000,
        latency_seconds=args.latency_seconds,
        repeats=args.repeats,
    )
    systems = [dtq_system()]
    if args.peers:
        peers = install_peers(args.peer or list(PEERS))
        systems += [peers[name] for name in args.peer or PEERS]
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "load_at_start": os.getloadavg(),
        },
        "quick": quick,
    }
    with tempfile.TemporaryDirectory(prefix="dtq-bench-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            url = server.url
            say(f"redis-server {server.url} (AOF on, appendfsync everysec); load {_load()}")
            c = results["ceiling"] = await ceiling(url)
            say(
                f"raw ceilings: XADD {c['xadd_per_s']:,.0f}/s, XREADGROUP+XACK "
                f"{c['xreadgroup_xack_per_s']:,.0f}/s, cycle {c['cycle_per_s']:,.0f}/s"
            )
            a = results["A"] = await scenario_a(url, args.tasks)
            say(
                f"A: enqueue_many {a['enqueue_per_s']:,.0f}/s; drain of {args.tasks:,} no-op "
                f"tasks {a['drain_per_s']:,.0f}/s (Redis {a['redis_cpu_us_per_task']:.1f} us, "
                f"worker {a['worker_cpu_us_per_task']:.1f} us CPU per task)"
            )
            if not quick:
                al = results["A_limited"] = await scenario_a(
                    url, args.tasks, concurrency=100_000, rate="1000000/s"
                )
                say(f"A with queue limits: {al['drain_per_s']:,.0f}/s")
                results["G"] = await groups(url, args.tasks)
            say(
                f"scenarios as users see them ({', '.join(s.name for s in systems)}), "
                f"{sizes.repeats} repeat(s), interleaved"
            )
            results["users"] = await asyncio.to_thread(compare, url, systems, sizes)
            d = results["D"] = await scenario_d(url, 20000, args.rss_tasks)
            say(
                f"D: {d['redis_bytes_per_queued_task']:,.0f} B per queued task; worker RSS "
                f"+{d['worker_rss_growth_mib']:.1f} MiB over {d['tasks_after_warmup']:,} tasks"
            )
            if not quick:
                await connect(url).flushall()
                e = results["E"] = await asyncio.to_thread(api_bench, url, args.api_seconds)
                say(f"E: REST submits {e.get('single_requests_per_s', 0):,.0f}/s")
                f = results["F"] = await gateway_bench(url)
                say(f"F: gateway p99 delay {f['p99_delay_ms']:.1f} ms")
                results["W"] = await workflow_bench(url)
                say(f"W: chain per step {results['W']['chain_per_step_ms']:.2f} ms")
            # -- every core (tests/bench/processes.py): CPU-bound scaling, --processes 2 drain --
            results["P"] = await processes_bench(
                url,
                cpu_tasks=500 if quick else 2000,
                drain_tasks=args.tasks,
                repeats=1 if quick else args.process_repeats,
                progress=say,
            )
        finally:
            server.stop()
    results["machine"]["load_at_end"] = os.getloadavg()
    return results


async def groups(url: str, n: int) -> dict[str, Any]:
    """G: the same tasks in the same run: no groups and no limits, then 1,000 groups, then
    1,000 groups under a group limit; memory per waiting task without and with groups."""
    g: dict[str, Any] = {}
    for key, label, options in (
        ("plain", "no groups", {}),
        ("grouped", "1,000 groups", {"groups": 1000}),
        ("limited", "1,000 groups, group_concurrency 5", {"groups": 1000, "group_concurrency": 5}),
    ):
        run = g[key] = await scenario_a(url, n, **options)
        say(
            f"G: drain, {label}: {run['drain_per_s']:,.0f}/s "
            f"(Redis {run['redis_cpu_us_per_task']:.1f} us CPU per task)"
        )
    g["plain_bytes"] = await queued_memory(url, 20000)
    g["grouped_bytes"] = await queued_memory(url, 20000, groups=1000)
    say(
        f"G: Redis memory per waiting task {g['plain_bytes']:,.0f} B ungrouped, "
        f"{g['grouped_bytes']:,.0f} B in 1,000 groups"
    )
    return g


def _load() -> str:
    return " / ".join(f"{v:.2f}" for v in os.getloadavg()) + " (1 / 5 / 15 min)"


def write_outputs(res: dict[str, Any], ns: argparse.Namespace) -> None:
    """The tables on stdout; JSON, the comparison as Markdown and the chart under .bench/."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = ROOT / ".bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = Path(ns.out) if ns.out else out_dir / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    compared = res["users"]
    sys.stdout.write("\n" + table(res) + "\n\n")
    sys.stdout.write("As users see it (one worker process each):\n")
    sys.stdout.write(comparison_table(compared) + "\n")
    for name, system in compared["systems"].items():
        sys.stdout.write(f"  {name} {system['version']}: {system['config']}\n")
    load = res["machine"]
    sys.stdout.write(
        f"\nload average at the start {load['load_at_start'][0]:.2f}, "
        f"at the end {load['load_at_end'][0]:.2f} ({load['cpus']} CPUs)\n"
    )
    res["comparison"] = ratio_rows(compared)
    out.write_text(json.dumps(res, indent=2))
    out.with_suffix(".md").write_text(
        table(res, markdown=True) + "\n\n" + comparison_table(compared, markdown=True) + "\n"
    )
    written = [out, out.with_suffix(".md")]
    if len(compared["systems"]) > 1:
        subtitle = (
            f"median of {compared['sizes']['repeats']} interleaved runs, "
            f"{time.strftime('%Y-%m-%d')}, {load['cpus']} CPUs, load average "
            f"{load['load_at_start'][0]:.1f}-{load['load_at_end'][0]:.1f}"
        )
        svg = ratios_svg(res["comparison"], "dtq / the best peer, figure by figure", subtitle)
        out.with_suffix(".svg").write_text(svg)
        written.append(out.with_suffix(".svg"))
        if ns.chart:
            Path(ns.chart).write_text(svg)
            written.append(Path(ns.chart))
    sys.stdout.write("figures written to " + ", ".join(str(p) for p in written) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also run the scenarios as users see them for BullMQ, huey, taskiq, arq and Celery "
        "(installed at pinned versions under .bench/), in the same run",
    )
    parser.add_argument(
        "--peer", action="append", choices=PEERS, help="with --peers: only this peer (repeatable)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: small sizes, one repeat, no queue-limit, group, REST, gateway or "
        "workflow scenarios",
    )
    parser.add_argument("--tasks", type=int, default=None, help="tasks per drain (20,000)")
    parser.add_argument("--latency-seconds", type=float, default=None, help="B's length (10 s)")
    parser.add_argument("--repeats", type=int, default=None, help="runs of each user scenario (3)")
    parser.add_argument("--rss-tasks", type=int, default=None)
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
    parser.add_argument("--out", default="", help="the JSON file (.bench/results/<time>.json)")
    parser.add_argument("--chart", default="", help="also write the chart (SVG) here")
    ns = parser.parse_args()
    quick_defaults = {"tasks": 2000, "latency_seconds": 2.0, "repeats": 1, "rss_tasks": 20000}
    full_defaults = {"tasks": 20000, "latency_seconds": 10.0, "repeats": 3, "rss_tasks": 100000}
    for key, value in (quick_defaults if ns.quick else full_defaults).items():
        if getattr(ns, key) is None:
            setattr(ns, key, value)
    configure_logging("ERROR")  # the bench's own client: its progress lines are the output
    res = asyncio.run(main(ns))
    results_ns = res.get("cluster")
    if results_ns:
        sys.stdout.write(cluster_table(results_ns) + "\n")
        out = Path(ns.out or ROOT / ".bench" / "cluster.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2))
        sys.stdout.write(f"\nfigures written to {out}\n")
    else:
        write_outputs(res, ns)
