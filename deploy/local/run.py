"""``just up``: run the dtq stack as local processes, with one combined log.

Starts a local ``redis-server`` (AOF on, data under ``.data/redis``) unless ``DTQ_REDIS_URL``
already answers, then every service of the stack. Ctrl-C (or SIGTERM) stops them all: the
workers drain, the scheduler hands its leadership over, Redis shuts down saving its AOF.
"""

from __future__ import annotations

import argparse
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / ".data"
COLORS = ["36", "33", "35", "32", "34", "31", "96", "93"]


@dataclass
class Service:
    """One process of the stack (the same services docker-compose.yml runs)."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def answers(url: str, timeout: float = 0.5) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "localhost", parsed.port or 6379), timeout=timeout
        ) as s:
            s.sendall(b"PING\r\n")
            reply = s.recv(64)
            return reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")
    except OSError:
        return False


def free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stack(redis_url: str, workers: int) -> list[Service]:
    py = sys.executable
    services = [
        Service(
            f"worker-{i + 1}",
            [py, "-m", "dtq_worker", "--app", "examples.tasks:registry"],
            {"DTQ_WORKER_METRICS_PORT": str(8001 + 10 * i), "DTQ_WORKER_ID": f"local-{i + 1}"},
        )
        for i in range(workers)
    ]
    services += [
        Service("ingest-api", [py, "-m", "dtq_ingest_api"], {"DTQ_API_PORT": "8000"}),
        Service("event-gateway", [py, "-m", "dtq_event_gateway"], {"DTQ_GATEWAY_PORT": "8002"}),
    ]
    services += [
        Service(
            f"scheduler-{i + 1}",
            [py, "-m", "dtq_scheduler_leader", "--app", "examples.tasks:registry"],
            {"DTQ_SCHEDULER_METRICS_PORT": str(8003 + 10 * i)},
        )
        for i in range(2)
    ]
    for s in services:
        s.env.setdefault("DTQ_REDIS_URL", redis_url)
    return services


def start_redis(url: str) -> tuple[str, subprocess.Popen[bytes] | None]:
    """The Redis to use: ``url`` when it answers, else a local ``redis-server`` with AOF."""
    if answers(url):
        return url, None
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed: apt-get install -y redis-server")
    port = 6379 if free(6379) else next(p for p in range(6380, 6480) if free(p))
    (DATA / "redis").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(DATA / "redis"),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the runner only; it stops Redis last
    )
    local = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while not answers(local):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("redis-server did not start")
        time.sleep(0.05)
    return local, proc


def banner(url: str, local: bool) -> str:
    where = "  (local, data in .data/redis)" if local else ""
    return f"""
dtq is running (Ctrl-C stops everything)
  Redis            {url}{where}
  REST API         http://127.0.0.1:8000/api/v1  (OpenAPI: http://127.0.0.1:8000/schema)
  events           ws://127.0.0.1:8002/ws/events  http://127.0.0.1:8002/sse/events
  worker metrics   http://127.0.0.1:8001/metrics
  scheduler        http://127.0.0.1:8003/metrics, http://127.0.0.1:8013/metrics
Submit a first task from another terminal:
  curl -s -X POST http://127.0.0.1:8000/api/v1/tasks -H 'Content-Type: application/json' \\
       -d '{{"task": "examples.add", "args": [1, 2]}}'
  DTQ_REDIS_URL={url} uv run dtq enqueue examples.add --args '[1, 2]' --wait 10
  DTQ_REDIS_URL={url} uv run dtq status
"""


class Supervisor:
    """Runs the processes and interleaves their output, one colored prefix per service."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.stopping = False

    def watch(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        color = COLORS[len(self.procs) % len(COLORS)]
        self.procs.append((name, proc))
        if proc.stdout is not None:
            self.sel.register(proc.stdout, selectors.EVENT_READ, (name, color))

    def launch(self, svc: Service, env: dict[str, str]) -> None:
        proc = subprocess.Popen(
            svc.argv,
            env={**env, **svc.env},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Own session: a terminal's Ctrl-C reaches the runner only, which sends one
            # SIGTERM (a second signal would make a worker exit without draining).
            start_new_session=True,
        )
        self.watch(svc.name, proc)

    def pump(self) -> str | None:
        """Copy output until a signal arrives; returns the name of a process that died."""
        width = max(len(n) for n, _ in self.procs) + 1
        while not self.stopping:
            for key, _ in self.sel.select(timeout=0.5):
                name, color = key.data
                line = key.fileobj.readline()  # type: ignore[union-attr]
                if not line:
                    self.sel.unregister(key.fileobj)
                    continue
                text = line.decode(errors="replace")
                sys.stdout.write(f"\033[{color}m{name:<{width}}|\033[0m {text}")
            sys.stdout.flush()
            for name, proc in self.procs:
                if proc.poll() is not None and name != "redis":
                    return name
        return None

    def stop(self, redis: subprocess.Popen[bytes] | None) -> None:
        """SIGTERM every service (workers drain), then Redis last."""
        services = [(n, p) for n, p in self.procs if p is not redis]
        for _, proc in services:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in services:
            try:
                out, _ = proc.communicate(timeout=45)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            for line in (out or b"").decode(errors="replace").splitlines():
                sys.stdout.write(f"{name}| {line}\n")
        if redis is not None:
            redis.send_signal(signal.SIGTERM)
            redis.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()

    url, redis_proc = start_redis(os.environ.get("DTQ_REDIS_URL", "redis://localhost:6379/0"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    sup = Supervisor()
    if redis_proc is not None:
        sup.watch("redis", redis_proc)
    for svc in stack(url, args.workers):
        sup.launch(svc, env)
    sys.stdout.write(banner(url, redis_proc is not None))
    sys.stdout.flush()

    def on_signal(signum: int, _frame: object) -> None:
        sup.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        dead = sup.pump()
        if dead:
            sys.stdout.write(f"stopping: {dead} exited\n")
    finally:
        sup.stop(redis_proc)
        sys.stdout.write("dtq stopped\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
