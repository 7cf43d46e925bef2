"""Bench, "every core": what ``dtq-worker --processes N`` and ``executor="process"`` buy.

- **CPU-bound scaling**: N tasks of about 5 ms of pure-Python CPU each (a fixed number of rounds,
  sized on this machine first), drained by one worker with 1 and with 2 worker processes
  (``async def`` handlers: ``--processes``), and by one worker process with 1 and with 2 handler
  processes (a plain ``def`` with ``executor="process"``: DTQ_WORKER_PROCESS_POOL). The ratio of
  the two rates is the scaling; 2 cores bound it at 2.
- **The one-Redis-call drain with --processes 2**: 20,000 tasks whose handler makes one Redis
  call through its own client (``INCR bench:done``), enqueued with no worker running, then one
  worker of concurrency 50 starts: ``--processes 1``, ``--processes 2`` with 25 each (50 in
  all) and with 50 each; beside it BullMQ (one Node process, ``concurrency`` 50) when its harness
  and modules are there (``tests/bench/peers/bullmq_peer.cjs``, ``.bench/node``, as
  ``just bench --peers`` installs them). ``bench:done`` is read every 5 ms; the rate is what was
  counted between the first reading above zero and the one that reaches N, over that time.

Each repeat runs every variant once, the order rotated by one per repeat, on a Redis flushed
before each; the figures are the medians of the repeats (every run kept in the JSON). The load
average of the machine at the start and the end goes with them: on a shared host they are what
to read the figures against.

Run alone: ``uv run --all-packages python tests/bench/processes.py [--quick] [--repeats N]``
(its own Redis; the figures in ``.bench/processes.json``); ``tests/bench/run.py`` calls
:func:`processes_bench` and adds :func:`processes_rows` to its table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from dtq_core import Client, TaskRequest
from dtq_core.infra.log import configure_logging
from dtq_core.ops.admin import Admin
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from processes_app import DONE, rounds_per_ms  # noqa: E402 - this folder, put on the path above

CPU_QUEUE = "bench-cpu"
DRAIN_QUEUE = "bench"
TASK_MS = 5.0


# -- processes ------------------------------------------------------------------------------


def start_worker(
    url: str, queue: str, *, processes: int, concurrency: int, pool: int = 0
) -> subprocess.Popen[bytes]:
    """``dtq-worker --app processes_app:registry`` with ``processes`` worker processes; with
    ``pool``, ``processes_app:in_processes`` with that many handler processes."""
    env = {
        **os.environ,
        "DTQ_REDIS_URL": url,
        "BENCH_REDIS_URL": url,
        "DTQ_WORKER_METRICS_PORT": "0",
        "DTQ_WORKER_CONCURRENCY": str(concurrency),
        "DTQ_WORKER_PROCESSES": str(processes),
        "DTQ_WORKER_PROCESS_POOL": str(pool),
        "DTQ_LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    app = "processes_app:in_processes" if pool else "processes_app:registry"
    argv = [sys.executable, "-m", "dtq_worker", "--app", app]
    return subprocess.Popen(
        [*argv, "--queues", queue],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and every process under it (worker and handler processes)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        p = int(stat.parent.name)
        parents[p] = int(fields[1])
        cpu[p] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo += [c for c, parent in parents.items() if parent == p]
    return total


async def redis_cpu(r: aioredis.Redis) -> float:
    info = await r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- CPU-bound scaling ----------------------------------------------------------------------


async def cpu_drain(
    url: str, *, task: str, n: int, rounds: int, processes: int, pool: int = 0
) -> dict[str, float]:
    """``n`` tasks of ``rounds`` rounds, drained by a worker started on the paused queue (its
    start-up is not timed); the rate from the first start to the last end (events)."""
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    admin = Admin(client)
    await admin.create_queue(CPU_QUEUE)
    await admin.pause(CPU_QUEUE)
    for start in range(0, n, 2000):
        await client.enqueue_many(
            [
                TaskRequest(task=task, args=[rounds], queue=CPU_QUEUE)
                for _ in range(min(2000, n - start))
            ]
        )
    events = Keys().queue(CPU_QUEUE).events
    proc = start_worker(url, CPU_QUEUE, processes=processes, concurrency=4, pool=pool)
    try:
        await wait_until(lambda: _registered(client.redis, processes), timeout=180, interval=0.2)
        cpu0, rcpu0 = tree_cpu(proc.pid), await redis_cpu(client.redis)
        await admin.resume(CPU_QUEUE)
        await wait_until(lambda: _ended(client.redis, events, n), timeout=600, interval=0.2)
        span = await _span(client.redis, events, n)
        worker_s = tree_cpu(proc.pid) - cpu0
        redis_us = (await redis_cpu(client.redis) - rcpu0) / n * 1e6
    finally:
        stop(proc)
        await client.aclose()
    return {
        "per_s": n / span,
        "worker_cpu_ms_per_task": worker_s / n * 1000,
        # The cores the worker's processes got: below the processes it runs, the machine's
        # other load took the rest (read the rate against it).
        "worker_cores": worker_s / span,
        "redis_cpu_us_per_task": redis_us,
    }


async def _registered(r: aioredis.Redis, count: int) -> bool:
    return int(await r.zcard(Keys().workers)) >= count


async def _ended(r: aioredis.Redis, events: str, n: int) -> bool:
    return await _count(r, events, ("task.succeeded", "task.dead")) >= n


async def _count(r: aioredis.Redis, events: str, types: tuple[str, ...]) -> int:
    total, cursor = 0, "-"
    while entries := await r.xrange(events, min=cursor, count=5000):
        for _, fields in entries:
            if fields["type"] in types:
                total += len(fields["ids"].split(","))
        cursor = "(" + entries[-1][0]
    return total


async def _span(r: aioredis.Redis, events: str, n: int) -> float:
    """Seconds from the first ``task.started`` to the ``n``-th task ended (stream ids are
    Redis's milliseconds; one is added so that a span is never zero)."""
    first = last = None
    seen, cursor = 0, "-"
    while entries := await r.xrange(events, min=cursor, count=5000):
        for eid, fields in entries:
            ts = int(eid.split("-")[0]) / 1000
            if fields["type"] == "task.started" and first is None:
                first = ts
            if fields["type"] in {"task.succeeded", "task.dead"}:
                seen += len(fields["ids"].split(","))
                if seen >= n and last is None:
                    last = ts
        cursor = "(" + entries[-1][0]
    if first is None or last is None:
        raise RuntimeError("lifecycle events missing")
    return last - first + 0.001


# -- the one-Redis-call drain ---------------------------------------------------------------


async def counted_rate(
    r: aioredis.Redis, n: int, proc: subprocess.Popen[bytes]
) -> dict[str, float]:
    """Read ``bench:done`` every 5 ms: the rate between the first reading above zero and the
    one that reaches ``n``, with the Redis and worker CPU over that span."""
    first_t = first_v = None
    cpu0 = rcpu0 = 0.0
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {proc.returncode}")
        done = int(await r.get(DONE) or 0)
        now = time.perf_counter()
        if first_t is None and done > 0:
            first_t, first_v = now, done
            cpu0, rcpu0 = tree_cpu(proc.pid), await redis_cpu(r)
        if first_t is not None and first_v is not None and done >= n:
            tasks = done - first_v
            return {
                "per_s": tasks / (now - first_t),
                "worker_cpu_us_per_task": (tree_cpu(proc.pid) - cpu0) / tasks * 1e6,
                "redis_cpu_us_per_task": (await redis_cpu(r) - rcpu0) / tasks * 1e6,
            }
        await asyncio.sleep(0.005)
    raise RuntimeError(f"{n} tasks were not done within 600 s")


async def dtq_drain(url: str, *, n: int, processes: int, concurrency: int) -> dict[str, float]:
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    for start in range(0, n, 2000):
        await client.enqueue_many(
            [TaskRequest(task="incr", queue=DRAIN_QUEUE) for _ in range(min(2000, n - start))]
        )
    proc = start_worker(url, DRAIN_QUEUE, processes=processes, concurrency=concurrency)
    try:
        return await counted_rate(client.redis, n, proc)
    finally:
        stop(proc)
        await client.aclose()


def bullmq_paths(peers_dir: Path, node_modules: Path) -> tuple[Path, Path] | None:
    harness = peers_dir / "bullmq_peer.cjs"
    if harness.exists() and (node_modules / "bullmq").exists() and _which("node"):
        return harness, node_modules
    return None


def _which(program: str) -> bool:
    return any(Path(p, program).exists() for p in os.environ.get("PATH", "").split(os.pathsep))


async def bullmq_drain(
    url: str, *, n: int, concurrency: int, paths: tuple[Path, Path]
) -> dict[str, float]:
    """The same drain by BullMQ's harness (``bullmq_peer.cjs``: ``produce``, then ``work``)."""
    harness, node_modules = paths
    r = aioredis.Redis.from_url(url, decode_responses=True)
    await r.flushall()
    env = {**os.environ, "BENCH_REDIS_URL": url, "NODE_PATH": str(node_modules)}
    produce = ["node", str(harness), "produce", "--kind", "incr", "--n", str(n)]
    await asyncio.to_thread(subprocess.run, produce, env=env, check=True, capture_output=True)
    proc = _start_bullmq(harness, concurrency, env)
    try:
        return await counted_rate(r, n, proc)
    finally:
        stop(proc)
        await r.aclose()


def _start_bullmq(harness: Path, concurrency: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    work = ["node", str(harness), "work", "--concurrency", str(concurrency)]
    return subprocess.Popen(work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# -- the whole scenario ---------------------------------------------------------------------

Variant = tuple[str, Callable[[], Awaitable[dict[str, float]]]]


async def processes_bench(
    url: str,
    *,
    cpu_tasks: int = 2000,
    drain_tasks: int = 20000,
    repeats: int = 3,
    peers_dir: Path = HERE / "peers",
    node_modules: Path = ROOT / ".bench" / "node" / "node_modules",
    progress: Callable[[str], None] = lambda line: None,
    only: str = "",
) -> dict[str, Any]:
    """Every variant ``repeats`` times, rotated; the medians, the scaling ratios, every run.
    ``only``: ``cpu`` or ``drain`` runs that half alone."""
    rounds = round(TASK_MS * max(rounds_per_ms() for _ in range(5)))
    bullmq = bullmq_paths(peers_dir, node_modules)
    variants: list[Variant] = [
        (
            "cpu_async_p1",
            lambda: cpu_drain(url, task="spin", n=cpu_tasks, rounds=rounds, processes=1),
        ),
        (
            "cpu_async_p2",
            lambda: cpu_drain(url, task="spin", n=cpu_tasks, rounds=rounds, processes=2),
        ),
        (
            "cpu_process_pool1",
            lambda: cpu_drain(
                url, task="spin_process", n=cpu_tasks, rounds=rounds, processes=1, pool=1
            ),
        ),
        (
            "cpu_process_pool2",
            lambda: cpu_drain(
                url, task="spin_process", n=cpu_tasks, rounds=rounds, processes=1, pool=2
            ),
        ),
        ("drain_p1_c50", lambda: dtq_drain(url, n=drain_tasks, processes=1, concurrency=50)),
        ("drain_p2_c25", lambda: dtq_drain(url, n=drain_tasks, processes=2, concurrency=25)),
        ("drain_p2_c50", lambda: dtq_drain(url, n=drain_tasks, processes=2, concurrency=50)),
    ]
    if bullmq is not None:
        variants.append(
            (
                "drain_bullmq_c50",
                lambda: bullmq_drain(url, n=drain_tasks, concurrency=50, paths=bullmq),
            )
        )
    if only:
        variants = [v for v in variants if v[0].startswith(only)]
    load_start = os.getloadavg()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
    for repeat in range(repeats):
        shift = repeat % len(variants)
        for name, run in variants[shift:] + variants[:shift]:
            result = await run()
            runs[name].append(result)
            progress(f"{name} (repeat {repeat + 1}/{repeats}): {result['per_s']:,.0f}/s")
    median = {name: statistics.median(r["per_s"] for r in rs) for name, rs in runs.items()}
    cpu_runs = {name: rs for name, rs in runs.items() if name.startswith("cpu_")}
    cores = {
        name: statistics.median(r["worker_cores"] for r in rs) for name, rs in cpu_runs.items()
    }
    # Tasks per CPU-second the worker got: whether a process more does as much per core as
    # one alone, whatever the other load on the machine left it.
    per_core = {
        name: statistics.median(r["per_s"] / r["worker_cores"] for r in rs)
        for name, rs in cpu_runs.items()
    }
    out: dict[str, Any] = {
        "task_rounds": rounds,
        "task_cpu_ms": TASK_MS,
        "cpu_tasks": cpu_tasks,
        "drain_tasks": drain_tasks,
        "repeats": repeats,
        "cpus": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "median_per_s": median,
        "median_worker_cores": cores,
        "median_per_core_second": per_core,
        "runs": runs,
    }
    if "cpu_async_p1" in median:
        out["scaling_async_1_to_2_processes"] = median["cpu_async_p2"] / median["cpu_async_p1"]
        out["scaling_process_pool_1_to_2"] = (
            median["cpu_process_pool2"] / median["cpu_process_pool1"]
        )
        out["per_core_async_2_over_1"] = per_core["cpu_async_p2"] / per_core["cpu_async_p1"]
        out["per_core_pool_2_over_1"] = (
            per_core["cpu_process_pool2"] / per_core["cpu_process_pool1"]
        )
    if "drain_p1_c50" not in median:
        return out
    out["drain_p2_over_p1"] = median["drain_p2_c50"] / median["drain_p1_c50"]
    if bullmq is None:
        out["bullmq"] = (
            f"not measured: {peers_dir / 'bullmq_peer.cjs'} or {node_modules / 'bullmq'} missing "
            "(just bench --peers installs them)"
        )
    else:
        out["drain_p2_c25_over_bullmq_c50"] = median["drain_p2_c25"] / median["drain_bullmq_c50"]
        out["drain_p2_c50_over_bullmq_c50"] = median["drain_p2_c50"] / median["drain_bullmq_c50"]
    return out


def processes_rows(p: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The scenario's lines of the bench's table: figure, value, ratio, target."""
    m = p["median_per_s"]
    rows: list[tuple[str, str, str, str]] = []
    if "cpu_async_p1" in m:
        rows += _cpu_rows(p)
    if "drain_p1_c50" in m:
        rows += _drain_rows(p)
    load = ", ".join(f"{x:.1f}" for x in p["load_average_start"])
    rows.append(("P load average at its start (1, 5, 15 min)", load, f"{p['cpus']} CPUs", ""))
    return rows


def _cpu_rows(p: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    m = p["median_per_s"]
    c = p.get("median_worker_cores", {})
    ms = p["task_cpu_ms"]

    def got(name: str) -> str:
        return f"{c[name]:.2f} cores got" if name in c else ""

    return [
        (
            f"P CPU {ms:g} ms async, --processes 1",
            f"{m['cpu_async_p1']:,.0f}/s",
            got("cpu_async_p1"),
            "",
        ),
        (
            f"P CPU {ms:g} ms async, --processes 2",
            f"{m['cpu_async_p2']:,.0f}/s",
            f"{p['scaling_async_1_to_2_processes']:.2f} x 1 process; {got('cpu_async_p2')}",
            ">= 1.8",
        ),
        (
            f"P CPU {ms:g} ms executor=process, pool 1",
            f"{m['cpu_process_pool1']:,.0f}/s",
            got("cpu_process_pool1"),
            "",
        ),
        (
            f"P CPU {ms:g} ms executor=process, pool 2",
            f"{m['cpu_process_pool2']:,.0f}/s",
            f"{p['scaling_process_pool_1_to_2']:.2f} x pool 1; {got('cpu_process_pool2')}",
            ">= 1.8",
        ),
        (
            "P CPU tasks per core-second, 2 processes / 1",
            f"{p['per_core_async_2_over_1']:.2f} async, {p['per_core_pool_2_over_1']:.2f} pool",
            "1.00: linear in the cores got",
            "",
        ),
    ]


def _drain_rows(p: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    m = p["median_per_s"]
    rows = [
        ("P one-Redis-call drain, --processes 1, C=50", f"{m['drain_p1_c50']:,.0f}/s", "", ""),
        (
            "P one-Redis-call drain, --processes 2, C=2x25",
            f"{m['drain_p2_c25']:,.0f}/s",
            _vs_bullmq(p, "drain_p2_c25_over_bullmq_c50"),
            "> BullMQ C=50",
        ),
        (
            "P one-Redis-call drain, --processes 2, C=2x50",
            f"{m['drain_p2_c50']:,.0f}/s",
            _vs_bullmq(p, "drain_p2_c50_over_bullmq_c50"),
            "> BullMQ C=50",
        ),
    ]
    if "drain_bullmq_c50" in m:
        rows.append(
            ("P BullMQ, one-Redis-call drain, C=50", f"{m['drain_bullmq_c50']:,.0f}/s", "peer", "")
        )
    return rows


def _vs_bullmq(p: dict[str, Any], key: str) -> str:
    return f"{p[key]:.2f} x BullMQ" if key in p else "BullMQ not measured"


def _table(rows: list[tuple[str, str, str, str]]) -> str:
    head = ("figure", "value", "ratio", "target")
    width = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)) for r in [head, *rows]]
    return "\n".join(line.rstrip() for line in lines)


async def _main(ns: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dtq-bench-processes-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            return await processes_bench(
                server.url,
                cpu_tasks=500 if ns.quick else ns.cpu_tasks,
                drain_tasks=4000 if ns.quick else ns.drain_tasks,
                repeats=1 if ns.quick else ns.repeats,
                peers_dir=Path(ns.peers_dir),
                node_modules=Path(ns.node_modules),
                progress=lambda line: print(line, flush=True),
                only=ns.only,
            )
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="500 CPU tasks, 4,000 drained, once")
    parser.add_argument("--only", choices=("cpu", "drain"), default="", help="one half alone")
    parser.add_argument("--cpu-tasks", type=int, default=2000)
    parser.add_argument("--drain-tasks", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peers-dir", default=str(HERE / "peers"), help="where bullmq_peer.cjs is")
    parser.add_argument(
        "--node-modules",
        default=str(ROOT / ".bench" / "node" / "node_modules"),
        help="where bullmq and ioredis are installed",
    )
    parser.add_argument("--out", default=str(ROOT / ".bench" / "processes.json"))
    ns = parser.parse_args()
    configure_logging("ERROR")  # the bench's own client: its progress lines are the output
    results = asyncio.run(_main(ns))
    sys.stdout.write(_table(processes_rows(results)) + "\n")
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    sys.stdout.write(f"\nfigures written to {out}\n")
