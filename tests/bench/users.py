"""The scenarios as a user measures them, for dtq and, with ``just bench --peers``, for BullMQ,
huey, taskiq, arq and Celery in the same run, against the same Redis.

Every system is driven the same way, by its harness in ``peers/`` (its own code, written with its
public API) run as separate processes: ``produce`` enqueues, ``work`` is one worker process. The
handlers make their one Redis call through their own client, so what is measured is read from
Redis the same way for every system:

- **drain** (``incr``, concurrency 50; ``sleep``, concurrency 100): N tasks are enqueued with no
  worker running, then the worker starts; ``bench:done`` is read every 5 ms, and the rate is the
  tasks done between the first reading above zero and the reading at N, over that time (the
  worker's start-up is not in it). Redis CPU and the worker's CPU (its process tree) over the
  same span, per task; Redis memory per queued task from ``used_memory`` before and after the
  enqueue; the worker's RSS at the end.
- **latency**: an idle worker (one warm-up task run first), one task at a time at 200/s; each
  carries ``time.time_ns()`` taken just before the enqueue call, and the handler's first line
  subtracts it from its own clock (one host, one realtime clock). The enqueue calls' durations
  come from the same loop.

Peers are installed, at pinned versions, into ``.bench/venv-<peer>`` (uv) and ``.bench/node``
(npm); nothing of theirs enters dtq's environment.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / ".bench"
PEERS_DIR = Path(__file__).resolve().parent / "peers"
DONE = "bench:done"
LAT = "bench:lat"

PYPI_PINS: dict[str, list[str]] = {
    "huey": ["huey==3.5.4", "redis==8.1.0", "hiredis==3.5.0", "gevent==26.9.0"],
    "taskiq": [
        "taskiq==0.13.0",
        "taskiq-redis==1.2.4",
        "redis==8.1.0",
        "hiredis==3.5.0",
        "uvloop==0.23.0",
    ],
    "arq": ["arq==0.28.0", "redis==5.3.1", "hiredis==3.5.0", "uvloop==0.23.0"],
    "celery": ["celery[redis]==5.7.0", "redis==8.1.0", "hiredis==3.5.0", "gevent==26.9.0"],
}
NPM_PINS = ["bullmq@6.7.6", "ioredis@6.1.0"]
PEERS = ("bullmq", "huey", "taskiq", "arq", "celery")

CONFIG = {
    "dtq": "one worker process (uvloop); concurrency as DTQ_WORKER_CONCURRENCY; defaults",
    "bullmq": "one Node process, Worker `concurrency`; removeOnComplete: true",
    "huey": "RedisHuey (BRPOP); one consumer, thread workers, as many as the concurrency",
    "taskiq": "RedisStreamBroker (acked); `taskiq worker --workers 1 --max-async-tasks C` (uvloop)",
    "arq": "one worker, `max_jobs` C, `poll_delay` 0.01 s (default 0.5 s); uvloop",
    "celery": "Redis broker, no result backend; one worker, `--pool=threads --concurrency C "
    "--without-gossip --without-mingle --without-heartbeat`",
}


@dataclass(frozen=True)
class System:
    name: str
    argv: tuple[str, ...]
    """The harness command, without its own arguments."""
    version: str
    env: dict[str, str] = field(default_factory=dict)


def say(message: str) -> None:
    sys.stdout.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stdout.flush()


# -- installing the peers --------------------------------------------------------------------


def _uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    if not Path(found).exists():
        raise RuntimeError("uv is needed to install the peers (./dev bench installs it)")
    return found


def install_peers(names: list[str]) -> dict[str, System]:
    """Make each peer's environment under .bench/ (once per set of pins) and describe it."""
    out: dict[str, System] = {}
    for name in names:
        if name == "bullmq":
            out[name] = _install_node()
            continue
        venv = BENCH / f"venv-{name}"
        marker = venv / ".bench-pins"
        pins = " ".join(PYPI_PINS[name])
        if not marker.exists() or marker.read_text() != pins:
            say(f"installing {name} into {venv.relative_to(ROOT)}: {pins}")
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run(
                [_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True
            )
            subprocess.run(
                [_uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]
                + PYPI_PINS[name],
                check=True,
            )
            marker.write_text(pins)
        out[name] = System(
            name,
            (str(venv / "bin" / "python"), str(PEERS_DIR / f"{name}_peer.py")),
            PYPI_PINS[name][0].split("==")[1],
        )
    return out


def _install_node() -> System:
    node_dir = BENCH / "node"
    marker = node_dir / ".bench-pins"
    pins = " ".join(NPM_PINS)
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise RuntimeError("node and npm are needed for BullMQ (./dev bench installs them)")
    if not marker.exists() or marker.read_text() != pins:
        say(f"installing {pins} into {node_dir.relative_to(ROOT)} (npm)")
        shutil.rmtree(node_dir, ignore_errors=True)
        node_dir.mkdir(parents=True)
        (node_dir / "package.json").write_text('{"private": true}\n')
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--save-exact", *NPM_PINS],
            cwd=node_dir,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        marker.write_text(pins)
    return System(
        "bullmq",
        (node, str(PEERS_DIR / "bullmq_peer.cjs")),
        NPM_PINS[0].split("@")[1],
        {"NODE_PATH": str(node_dir / "node_modules")},
    )


def dtq_system() -> System:
    from importlib.metadata import version  # noqa: PLC0415

    return System("dtq", (sys.executable, str(PEERS_DIR / "dtq_peer.py")), version("dtq-core"))


# -- processes -------------------------------------------------------------------------------


def _env(system: System, url: str, concurrency: int) -> dict[str, str]:
    return {
        **os.environ,
        **system.env,
        "BENCH_REDIS_URL": url,
        "BENCH_CONCURRENCY": str(concurrency),
        "PYTHONPATH": str(PEERS_DIR),
    }


def produce(system: System, url: str, kind: str, n: int, rate: float = 0) -> dict[str, Any]:
    argv = [*system.argv, "produce", "--kind", kind, "--n", str(n)]
    if rate:
        argv += ["--rate", str(rate)]
    done = subprocess.run(
        argv, env=_env(system, url, 0), capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{system.name} produce failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Worker:
    """One worker process of ``system``, in its own session (its children die with it)."""

    def __init__(self, system: System, url: str, concurrency: int) -> None:
        self.name = system.name
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix=f"bench-{system.name}-", suffix=".log"
        )
        self.proc = subprocess.Popen(
            [*system.argv, "work", "--concurrency", str(concurrency)],
            env=_env(system, url, concurrency),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} worker exited {self.proc.returncode}:\n{self.tail()}")

    def tail(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def pids(self) -> list[int]:
        """The worker and every process it started (its session)."""
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == self.proc.pid:  # the session id
                found.append(int(stat.parent.name))
        return found

    def cpu_s(self) -> float:
        total = 0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        total = 0
        for pid in self.pids():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            total += next(
                (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")),
                0,
            )
        return total / 1024

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # Children of a worker that left before them (prefork pools, say).
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.log.close()


def bench_redis(url: str) -> redis.Redis:
    """The bench's own client: patient, since a loaded machine can stall Redis for seconds
    (an AOF fsync behind other processes' disk writes)."""
    return redis.Redis.from_url(url, socket_timeout=120, socket_connect_timeout=30)


def redis_cpu_s(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def wait_count(
    r: redis.Redis, read: Callable[[], int], target: int, worker: Worker, stall_s: float = 60
) -> None:
    last, changed = -1, time.monotonic()
    while (count := read()) < target:
        if count != last:
            last, changed = count, time.monotonic()
        elif time.monotonic() - changed > stall_s:
            raise RuntimeError(f"{worker.name}: stuck at {count}/{target}:\n{worker.tail()}")
        worker.check()
        time.sleep(0.005)


# -- scenarios -------------------------------------------------------------------------------


def drain(system: System, url: str, kind: str, n: int, concurrency: int) -> dict[str, float]:
    r = bench_redis(url)
    r.flushall()
    mem0 = int(r.info("memory")["used_memory"])
    produce(system, url, kind, n)
    mem1 = int(r.info("memory")["used_memory"])
    worker = Worker(system, url, concurrency)
    try:
        first: tuple[float, int, float, float] | None = None
        last, changed = -1, time.monotonic()
        while True:
            count = int(r.get(DONE) or 0)
            now = time.perf_counter()
            if count and first is None:
                first = (now, count, worker.cpu_s(), redis_cpu_s(r))
            if count >= n:
                break
            if count != last:
                last, changed = count, time.monotonic()
            elif time.monotonic() - changed > 60:
                raise RuntimeError(f"{system.name}: {kind} stuck at {count}/{n}:\n{worker.tail()}")
            worker.check()
            time.sleep(0.005)
        assert first is not None
        t1, c1, wcpu1, rcpu1 = first
        tasks = max(1, n - c1)
        result = {
            "per_s": tasks / max(now - t1, 1e-6),
            "redis_cpu_us_per_task": (redis_cpu_s(r) - rcpu1) / tasks * 1e6,
            "worker_cpu_us_per_task": (worker.cpu_s() - wcpu1) / tasks * 1e6,
            "worker_rss_mib": worker.rss_mib(),
            "redis_bytes_per_queued_task": (mem1 - mem0) / n,
        }
    finally:
        worker.stop()
        r.close()
    return result


def latency(system: System, url: str, n: int, rate: float, concurrency: int) -> dict[str, Any]:
    r = bench_redis(url)
    r.flushall()
    worker = Worker(system, url, concurrency)
    try:
        produce(system, url, "incr", 1)  # warm-up: the worker is up and has run a task
        wait_count(r, lambda: int(r.get(DONE) or 0), 1, worker)
        sent = produce(system, url, "latency", n, rate)
        wait_count(r, lambda: int(r.llen(LAT)), n, worker, stall_s=30)
        lat = sorted(int(v) / 1e6 for v in r.lrange(LAT, 0, -1))
        calls = sorted(v / 1e6 for v in sent["enqueue_ns"])
        result: dict[str, Any] = {
            "p50_ms": statistics.median(lat),
            "p99_ms": lat[int(len(lat) * 0.99) - 1],
            "max_ms": lat[-1],
            "samples": len(lat),
            "enqueue_p50_ms": statistics.median(calls),
            "enqueue_p99_ms": calls[int(len(calls) * 0.99) - 1],
        }
        if "ids" in sent:
            result["redis_side"] = redis_side_split(r, sent["ids"])
    finally:
        worker.stop()
        r.close()
    return result


def redis_side_split(r: redis.Redis, ids: list[str]) -> dict[str, float]:
    """dtq only: the part of the latency between the two Redis timestamps of the task's record
    (``ct``, the submit's time, and ``sa``, the claim's), the figure the bench used to report."""
    from dtq_core.protocol.keys import Keys  # noqa: PLC0415 - dtq's environment only

    qk = Keys().queue("bench")
    with r.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.hmget(qk.task(task_id.split(":")[1]), ["ct", "sa"])
        rows = pipe.execute()
    split = sorted((int(sa) - int(ct)) / 1000 for ct, sa in rows)
    return {"p50_ms": statistics.median(split), "p99_ms": split[int(len(split) * 0.99) - 1]}


def dtq_extra(system: System, url: str, command: str, n: int, concurrency: int) -> dict[str, Any]:
    argv = [*system.argv, command, "--n", str(n), "--concurrency", str(concurrency)]
    done = subprocess.run(
        argv,
        env=_env(system, url, concurrency),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"dtq {command} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@dataclass(frozen=True)
class Sizes:
    drain_tasks: int = 20000
    sleep_tasks: int = 5000
    latency_seconds: float = 10.0
    rate: float = 200.0
    concurrency: int = 50
    sleep_concurrency: int = 100
    repeats: int = 3


def compare(url: str, systems: list[System], sizes: Sizes) -> dict[str, Any]:
    """Every scenario for every system, ``sizes.repeats`` times, interleaved: each repeat runs
    each scenario for every system in turn (the order rotated by one each repeat), so the
    machine's noise falls on all alike. Returns the runs and their medians."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    n_lat = int(sizes.rate * sizes.latency_seconds)

    errors: list[dict[str, str]] = []

    def record(scenario: str, system: str, result: dict[str, Any] | None) -> bool:
        if result is not None:
            runs.setdefault(scenario, {}).setdefault(system, []).append(result)
        return result is not None

    def attempt(label: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """One measurement; a failure is reported and recorded, and the run goes on without
        it (a 30-minute run is not lost to one stalled peer)."""
        try:
            return run()
        except Exception as exc:  # any failure of a harness or a worker
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            say(f"{label}: FAILED ({type(exc).__name__}: {first[:200]})")
            errors.append({"measurement": label, "error": f"{type(exc).__name__}: {exc}"})
            return None

    dtq = next(s for s in systems if s.name == "dtq")
    c, sc = sizes.concurrency, sizes.sleep_concurrency
    per_system: list[tuple[str, str, Callable[[System], dict[str, Any]], Callable[..., str]]] = [
        (
            "redis_drain",
            f"drain, one Redis call, C={c}",
            lambda system: drain(system, url, "incr", sizes.drain_tasks, c),
            lambda res: (
                f"{res['per_s']:,.0f}/s (Redis {res['redis_cpu_us_per_task']:.0f} us, "
                f"worker {res['worker_cpu_us_per_task']:.0f} us CPU per task)"
            ),
        ),
        (
            "latency",
            f"enqueue->start at {sizes.rate:.0f}/s",
            lambda system: latency(system, url, n_lat, sizes.rate, c),
            lambda res: (
                f"p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms; enqueue call "
                f"{res['enqueue_p50_ms']:.2f} ms"
            ),
        ),
        (
            "sleep_drain",
            f"{sizes.sleep_tasks:,} x (sleep 10 ms + one Redis call), C={sc}",
            lambda system: drain(system, url, "sleep", sizes.sleep_tasks, sc),
            lambda res: f"{res['per_s']:,.0f}/s",
        ),
    ]
    for rep in range(sizes.repeats):
        order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
        tag = f"{rep + 1}/{sizes.repeats}"
        label = f"{tag} handler alone (INCR, concurrency {c})"
        res = attempt(label, lambda: dtq_extra(dtq, url, "alone", sizes.drain_tasks, c))
        if record("handler_alone", "dtq", res):
            say(f"{label}: {res['per_s']:,.0f}/s")
        label = f"{tag} dtq enqueue against PING"
        res = attempt(label, lambda: dtq_extra(dtq, url, "ping", 2000, 1))
        if record("enqueue_vs_ping", "dtq", res):
            say(
                f"{label}: enqueue {res['enqueue_us_p50']:.0f} us, PING "
                f"{res['ping_us_p50']:.0f} us (p50, same connection)"
            )
        for scenario, what, run, line in per_system:
            for system in order:
                label = f"{tag} {what}, {system.name}"
                res = attempt(label, functools.partial(run, system))
                if record(scenario, system.name, res):
                    say(f"{label}: {line(res)}")
    return {
        "sizes": sizes.__dict__,
        "systems": {s.name: {"version": s.version, "config": CONFIG[s.name]} for s in systems},
        "runs": runs,
        "errors": errors,
        "medians": {
            scenario: {name: summarize(results) for name, results in by_system.items()}
            for scenario, by_system in runs.items()
        },
    }


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of every numeric figure of a system's repeats."""
    out: dict[str, Any] = {}
    for key, value in results[0].items():
        if isinstance(value, dict):
            out[key] = summarize([r[key] for r in results])
        elif isinstance(value, int | float):
            values = [float(r[key]) for r in results]
            out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


# -- the comparison table ----------------------------------------------------------------------

ROWS: list[tuple[str, str, str, str, bool]] = [
    # label, scenario, figure, unit, higher is better
    ("drain, handler with one Redis call, C=50", "redis_drain", "per_s", "/s", True),
    ("enqueue->start p50, 200/s, idle worker", "latency", "p50_ms", "ms", False),
    ("enqueue->start p99", "latency", "p99_ms", "ms", False),
    ("sleep 10 ms + one Redis call, C=100", "sleep_drain", "per_s", "/s", True),
    ("one enqueue call, p50", "latency", "enqueue_p50_ms", "ms", False),
    ("Redis CPU per task (one-call drain)", "redis_drain", "redis_cpu_us_per_task", "us", False),
    ("worker CPU per task (one-call drain)", "redis_drain", "worker_cpu_us_per_task", "us", False),
    (
        "Redis bytes per queued task (no args)",
        "redis_drain",
        "redis_bytes_per_queued_task",
        "B",
        False,
    ),
    ("worker RSS after the drain", "redis_drain", "worker_rss_mib", "MiB", False),
]


def _fmt(value: float, unit: str) -> str:
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "ms":
        return f"{value:.2f} ms"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    return f"{value:,.0f} {unit}" if unit == "B" else f"{value:.0f} {unit}"


def ratio_rows(compared: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per figure: every system's median and spread, the best peer, dtq / best peer."""
    medians = compared["medians"]
    names = list(compared["systems"])
    rows = []
    for label, scenario, figure, unit, higher in ROWS:
        cells = {}
        for name in names:
            stats = medians.get(scenario, {}).get(name, {}).get(figure)
            if stats:
                cells[name] = stats
        if "dtq" not in cells:
            continue
        peers = {k: v for k, v in cells.items() if k != "dtq"}
        best = None
        if peers:
            pick = max if higher else min
            best = pick(peers, key=lambda k: peers[k]["median"])
        row: dict[str, Any] = {
            "label": label,
            "scenario": scenario,
            "figure": figure,
            "unit": unit,
            "higher_is_better": higher,
            "values": cells,
            "best_peer": best,
        }
        if best is not None:
            row["ratio"] = cells["dtq"]["median"] / peers[best]["median"]
            row["dtq_ahead"] = row["ratio"] > 1 if higher else row["ratio"] < 1
        rows.append(row)
    return rows


def _cell(stats: dict[str, float], unit: str) -> str:
    med = stats["median"]
    spread = (stats["max"] - stats["min"]) / 2 / med * 100 if med else 0.0
    return _fmt(med, unit) + (f" ±{spread:.0f}%" if spread >= 0.5 else "")


def comparison_table(compared: dict[str, Any], markdown: bool = False) -> str:
    names = list(compared["systems"])
    rows = ratio_rows(compared)
    head = ["figure (median of repeats, ± half the range)", *names]
    has_peers = len(names) > 1
    if has_peers:
        head += ["best peer", "dtq / best peer"]
    body = []
    for row in rows:
        line = [row["label"]]
        line += [_cell(row["values"][n], row["unit"]) if n in row["values"] else "" for n in names]
        if has_peers:
            verdict = "ahead" if row["dtq_ahead"] else "trails"
            better = "higher" if row["higher_is_better"] else "lower"
            line += [row["best_peer"], f"{row['ratio']:.2f}x ({better} is better: {verdict})"]
        body.append(line)
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(out)
    width = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, width, strict=True))]
    lines.append("  ".join("-" * w for w in width))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)) for r in body]
    return "\n".join(lines)
