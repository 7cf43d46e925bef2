"""``just up``: run what docker-compose.yml runs, as local processes, with one combined log.

Starts a local ``redis-server`` on ``deploy/redis/redis.conf`` (AOF on, data under
``.data/redis``) unless ``DTQ_REDIS_URL`` already answers; with ``--redis cluster`` a local
Redis Cluster of 6 nodes (3 masters, 3 replicas, ports 7000-7005, data under
``.data/redis-cluster``), with ``--redis sentinel`` a master, a replica and 3 sentinels (ports
6380, 6381 and 26379-26381, data under ``.data/redis-sentinel``), every service given the
matching ``DTQ_REDIS_URL`` (``deploy/local/redis_topologies.py``); then ``dtq migrate`` (the
function library); then the workers, ingest-api, event-gateway and two scheduler-leader
replicas; the dashboard behind nginx on port 3000 when nginx is installed; Prometheus on port 9090,
scraping every process, when it is installed; and a trace view on port 16686 receiving every
process's spans over OTLP (``dtq_devtools.traceview``) unless ``DTQ_OTLP_ENDPOINT`` names another.
A service that exits is started again, as compose's ``restart: unless-stopped`` does, after
a delay that doubles from 0.5 s up to 30 s, and the combined log says so; one that exits 5
times within 60 s stops the stack, with exit status 1 (:class:`RestartPolicy`). Ctrl-C (or
SIGTERM) stops them all: the workers drain, the scheduler hands its leadership over, the
sentinels stop, then every Redis shuts down saving its AOF.

:func:`stack` is the one description of the local stack; ``tests/deploy/test_parity.py``
compares it with docker-compose.yml (services, commands, ports, ``DTQ_*`` environment), so
the two cannot drift apart. The differences are the documented ones below.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TextIO
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / ".data"
REDIS_CONF = ROOT / "deploy" / "redis" / "redis.conf"
NGINX_TEMPLATE = ROOT / "deploy" / "nginx" / "dtq.conf.template"
DASHBOARD = ROOT / "services" / "dashboard"
TOPOLOGIES = ("standalone", "cluster", "sentinel")
COLORS = ["36", "33", "35", "32", "34", "31", "96", "93"]
APP = "examples.tasks:registry"

API_PORT = 8000
WORKER_METRICS_PORT = 8001
GATEWAY_PORT = 8002
SCHEDULER_METRICS_PORT = 8003
DASHBOARD_PORT = 3000
PROMETHEUS_PORT = 9090
OTLP_PORT = 4318
TRACES_UI_PORT = 16686
TRACE_URL = f"http://127.0.0.1:{TRACES_UI_PORT}/trace/{{trace_id}}"
"""A trace in the local trace view (Jaeger's path too)."""
REPLICA_PORT_STEP = 10
"""Replica i (from 0) of a scaled service listens on its port + 10 * i: in containers every
replica has its own address and the same port, here they share 127.0.0.1."""

ENTRY_POINTS = {
    "dtq": "dtq_core.ops.cli",
    "dtq-worker": "dtq_worker",
    "dtq-scheduler": "dtq_scheduler_leader",
    "dtq-ingest-api": "dtq_ingest_api",
    "dtq-event-gateway": "dtq_event_gateway",
}
"""Console scripts of the workspace and their modules (``python -m`` when the script is not
installed next to the interpreter)."""

# -- the documented differences from docker-compose.yml ---------------------------------------

COMPOSE_ONLY_SERVICES = {
    "grafana": "no local Grafana binary is assumed; Prometheus on :9090 serves the same queries",
    "otel-collector": "the optional tracing profile; locally set DTQ_OTLP_ENDPOINT to any "
    "OTLP/HTTP endpoint instead",
    "jaeger": "the optional tracing profile's trace viewer",
}
COMPOSE_ONLY_ENV = {
    "DTQ_REDIS_USERNAME": "compose gives each service its own Redis ACL user; the local "
    "redis-server has only its default user",
    "DTQ_REDIS_PASSWORD_FILE": "the ACL user's password, a Docker secret",
    "DTQ_API_KEYS_FILE": "API keys (a Docker secret); `just up` is open local-dev mode",
    "DTQ_ENV": "production refuses to start without API keys; local runs are development",
    "DTQ_API_HOST": "containers listen on every interface; local processes on 127.0.0.1",
    "DTQ_GATEWAY_HOST": "containers listen on every interface; local processes on 127.0.0.1",
    "DTQ_LOG_JSON": "JSON lines for the container log driver; the terminal gets console lines",
    "DTQ_OTLP_ENDPOINT": "empty unless the tracing profile is on",
    "DTQ_TRACE_URL": "empty unless the tracing profile is on; `just up` links the task page "
    "to its own trace view when it runs one",
    "DTQ_API_TRUSTED_PROXIES": "nginx's container address is Docker's to pick; locally nginx "
    "is on 127.0.0.1, which the default trusts",
    "DTQ_ALLOWED_HOSTS": "from .env, for a dashboard that browsers reach by another name; "
    "locally they use localhost or 127.0.0.1, which are always served",
    "DTQ_DRAIN_TIMEOUT_S": "stated next to the worker's stop_grace_period, which must exceed it",
}
COMPOSE_REDIS_SERVICES = (
    *(f"redis-node-{i}" for i in range(2, 7)),
    "redis-cluster-create",
    "redis-replica",
    "sentinel-1",
    "sentinel-2",
    "sentinel-3",
)
COMPOSE_ONLY_SERVICES |= dict.fromkeys(
    COMPOSE_REDIS_SERVICES,
    "a Redis of compose's cluster or sentinel profile; `just up --redis cluster|sentinel` "
    "starts its own nodes and sentinels (deploy/local/redis_topologies.py)",
)
LOCAL_ONLY_SERVICES = {
    "traces": "compose's tracing profile runs an OpenTelemetry collector and Jaeger; locally "
    "dtq_devtools.traceview receives the spans on :4318 and shows them on :16686",
}
LOCAL_ONLY_ENV = {
    "DTQ_WORKER_ID": "stable names for local workers; containers use <hostname>-<pid>",
    "DTQ_METRICS_HOST": "metrics listeners stay on 127.0.0.1 here; in a container they listen "
    "on every interface for Prometheus",
}


@dataclass
class Service:
    """One process of the stack, and the docker-compose.yml service it stands for."""

    name: str
    """Its name in the combined log (``worker-1``)."""
    compose: str
    """Its service in docker-compose.yml (``worker``)."""
    command: list[str]
    """What compose runs as ``command:``; a workspace console script runs as that script."""
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None
    """The port it listens on (the API, the gateway, a metrics port, nginx, Prometheus)."""
    oneshot: bool = False
    """Runs to completion before the others start (compose: service_completed_successfully)."""
    requires: str | None = None
    """A system binary without which the service is left out (nginx, prometheus)."""
    metrics: bool = True
    """Serves ``/metrics`` on ``port`` (Prometheus scrapes it)."""


def answers(url: str, timeout: float = 0.5) -> bool:
    """Whether a Redis answers at ``url``: for a cluster or a Sentinel URL, its first node."""
    parsed = urlparse(url.split(",", 1)[0])
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
    """Whether a server can listen on ``port``: connections of a previous run waiting in
    TIME_WAIT do not count, since every service sets SO_REUSEADDR as this check does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stack(redis_url: str, workers: int = 1) -> list[Service]:
    """Every service of the local stack, in start order (one-shots first)."""
    services = [
        Service("migrate", "migrate", ["dtq", "migrate"], oneshot=True),
        Service(
            "traces",
            "traces",
            [
                sys.executable,
                "-m",
                "dtq_devtools.traceview",
                "--port",
                str(OTLP_PORT),
                "--ui-port",
                str(TRACES_UI_PORT),
            ],
            port=TRACES_UI_PORT,
            metrics=False,
        ),
    ]
    services += [
        Service(
            f"worker-{i + 1}",
            "worker",
            ["dtq-worker", "--app", APP],
            {
                "DTQ_WORKER_METRICS_PORT": str(WORKER_METRICS_PORT + REPLICA_PORT_STEP * i),
                "DTQ_WORKER_ID": f"local-{i + 1}",
                "DTQ_METRICS_HOST": "127.0.0.1",
            },
            port=WORKER_METRICS_PORT + REPLICA_PORT_STEP * i,
        )
        for i in range(workers)
    ]
    services += [
        Service(
            "ingest-api",
            "ingest-api",
            ["dtq-ingest-api"],
            {"DTQ_API_PORT": str(API_PORT)},
            port=API_PORT,
        ),
        Service(
            "event-gateway",
            "event-gateway",
            ["dtq-event-gateway"],
            {"DTQ_GATEWAY_PORT": str(GATEWAY_PORT)},
            port=GATEWAY_PORT,
        ),
    ]
    services += [
        Service(
            f"scheduler-{i + 1}",
            "scheduler-leader",
            ["dtq-scheduler", "--app", APP],
            {
                "DTQ_SCHEDULER_METRICS_PORT": str(SCHEDULER_METRICS_PORT + REPLICA_PORT_STEP * i),
                "DTQ_METRICS_HOST": "127.0.0.1",
            },
            port=SCHEDULER_METRICS_PORT + REPLICA_PORT_STEP * i,
        )
        for i in range(2)
    ]
    for s in services:
        if s.name != "traces":
            s.env["DTQ_REDIS_URL"] = redis_url
    nginx_conf = DATA / "nginx" / "nginx.conf"
    services.append(
        Service(
            "dashboard",
            "dashboard",
            ["nginx", "-c", str(nginx_conf), "-p", str(DATA / "nginx"), "-g", "daemon off;"],
            port=DASHBOARD_PORT,
            requires="nginx",
            metrics=False,
        )
    )
    services.append(
        Service(
            "prometheus",
            "prometheus",
            [
                "prometheus",
                f"--config.file={DATA / 'prometheus' / 'prometheus.yml'}",
                f"--storage.tsdb.path={DATA / 'prometheus' / 'data'}",
                f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
                "--log.level=warn",
            ],
            port=PROMETHEUS_PORT,
            requires="prometheus",
            metrics=False,
        )
    )
    return services


def redis_command(port: int, data_dir: Path) -> list[str]:
    """The local redis-server: compose's redis.conf, with the data dir, port and loopback
    address of this machine, and without the ACL file (local mode has the default user)."""
    return [
        "redis-server",
        str(REDIS_CONF),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(data_dir),
    ]


def prometheus_config(services: list[Service]) -> str:
    """A Prometheus config with a static target per local process, labelled with the
    compose service name as ``job`` (as deploy/prometheus/prometheus.yml does with DNS
    discovery), so the same dashboards and alerts work on both."""
    jobs: dict[str, list[str]] = {}
    for s in services:
        if s.port is None or s.oneshot or not s.metrics:
            continue
        jobs.setdefault(s.compose, []).append(f"127.0.0.1:{s.port}")
    lines = [
        "# Generated by deploy/local/run.py for `just up`; edits are overwritten.",
        "global:",
        "  scrape_interval: 5s",
        "  evaluation_interval: 15s",
        "  external_labels: {deployment: dtq-local}",
    ]
    alerts = ROOT / "deploy" / "prometheus" / "alerts.yml"
    if alerts.exists():
        lines += ["rule_files:", f"  - {alerts}"]
    lines.append("scrape_configs:")
    for job, targets in jobs.items():
        lines += [
            f"  - job_name: {job}",
            "    metrics_path: /metrics",
            "    static_configs:",
            f"      - targets: [{', '.join(targets)}]",
        ]
    return "\n".join(lines) + "\n"


def executable(command: list[str]) -> list[str]:
    """``command`` with a workspace console script resolved next to this interpreter."""
    head, *rest = command
    module = ENTRY_POINTS.get(head)
    if module is None:
        return command
    script = Path(sys.executable).parent / head
    if script.exists():
        return [str(script), *rest]
    return [sys.executable, "-m", module, *rest]


def start_redis(url: str) -> tuple[str, subprocess.Popen[bytes] | None]:
    """The Redis to use: ``url`` when it answers, else a local ``redis-server`` with AOF on
    the URL's port (or the next free one)."""
    if answers(url):
        return url, None
    if "+" in url.split("://", 1)[0]:
        kind = url.split("://", 1)[0].split("+")[1]
        raise SystemExit(
            f"DTQ_REDIS_URL={url} does not answer; start it, or unset DTQ_REDIS_URL and run "
            f"`just up --redis {kind}` for a local one"
        )
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed: apt-get install -y redis-server")
    wanted = urlparse(url).port or 6379
    port = wanted if free(wanted) else next(p for p in range(6380, 6480) if free(p))
    (DATA / "redis").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        redis_command(port, DATA / "redis"),
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


def start_topology(
    kind: str, url: str
) -> tuple[str, list[tuple[str, subprocess.Popen[bytes]]], str]:
    """The Redis of ``--redis kind``: its URL, the processes the runner started for it (in
    stop order) and what the banner says about it."""
    if kind == "standalone":
        url, proc = start_redis(url)
        if proc is None:
            return url, [], ""
        return url, [("redis", proc)], f"local, data in {DATA / 'redis'}"
    local = _load(
        Path(__file__).with_name("redis_topologies.py"), "dtq_deploy_local_redis_topologies"
    )
    start = local.start_cluster if kind == "cluster" else local.start_sentinel
    made = start(DATA, REDIS_CONF)
    return made.url, made.procs, f"{made.summary}; data in {made.data}"


def _load(path: Path, name: str) -> ModuleType:
    """Import a script beside this one (deploy/ is not a package); registered under ``name``
    so its dataclasses can find their module."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _dashboard_built() -> Path | None:
    """The SPA's dist, built with npm when node is here and dist is missing or stale."""
    dist = DASHBOARD / "dist"
    sources = (
        [p for p in (DASHBOARD / "src").rglob("*") if p.is_file()] if DASHBOARD.exists() else []
    )
    sources += [DASHBOARD / n for n in ("index.html", "package.json", "package-lock.json")]
    newest = max((p.stat().st_mtime for p in sources if p.exists()), default=0.0)
    index = dist / "index.html"
    if index.exists() and index.stat().st_mtime >= newest:
        return dist
    npm = shutil.which("npm")
    if npm is None or not (DASHBOARD / "package.json").exists():
        return dist if index.exists() else None
    sys.stdout.write("building the dashboard (npm ci && npm run build) ...\n")
    sys.stdout.flush()
    for step in (["ci", "--no-audit", "--no-fund"], ["run", "build"]):
        done = subprocess.run([npm, *step], cwd=DASHBOARD, check=False)
        if done.returncode != 0:
            sys.stdout.write(f"dashboard build failed (npm {' '.join(step)}); skipping it\n")
            return dist if index.exists() else None
    return dist


def _traces_elsewhere() -> str | None:
    """Why the local trace view is not needed or cannot run, or ``None``."""
    for variable in (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "DTQ_OTLP_ENDPOINT",
    ):
        if os.environ.get(variable, "").strip():
            return f"spans go to {variable}={os.environ[variable]}"
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "OTEL_SDK_DISABLED=true"
    if not free(OTLP_PORT):
        return f"port {OTLP_PORT} is in use"
    return None


def prepare(svc: Service, services: list[Service]) -> str | None:
    """Write what an optional service needs; the reason it is left out, or ``None``."""
    if svc.requires is not None and shutil.which(svc.requires) is None:
        return f"{svc.requires} is not installed"
    if svc.name == "traces" and (reason := _traces_elsewhere()):
        return reason
    if svc.compose == "dashboard":
        if not NGINX_TEMPLATE.exists():
            return "deploy/nginx/dtq.conf.template is missing"
        dist = _dashboard_built()
        if dist is None:
            return "the SPA is not built and npm is not installed"
        render = _load(NGINX_TEMPLATE.with_name("render.py"), "dtq_nginx_render")
        runtime = DATA / "nginx"
        runtime.mkdir(parents=True, exist_ok=True)
        text = render.render(
            f"127.0.0.1:{DASHBOARD_PORT}",
            f"127.0.0.1:{API_PORT}",
            f"127.0.0.1:{GATEWAY_PORT}",
            dist,
            runtime,
        )
        (runtime / "nginx.conf").write_text(text)
        svc.command = render.nginx_argv(runtime / "nginx.conf", runtime)
    if svc.compose == "prometheus":
        folder = DATA / "prometheus"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "prometheus.yml").write_text(prometheus_config(services))
    if svc.port is not None and not free(svc.port):
        return f"port {svc.port} is in use"
    return None


def banner(url: str, where: str, running: set[str]) -> str:
    lines = [
        "",
        "dtq is running (Ctrl-C stops everything)",
        f"  Redis            {url}",
    ]
    if where:
        lines.append(f"                   ({where})")
    if "dashboard" in running:
        lines.append(f"  dashboard        http://127.0.0.1:{DASHBOARD_PORT}/")
    lines += [
        f"  REST API         http://127.0.0.1:{API_PORT}/api/v1  "
        f"(OpenAPI: http://127.0.0.1:{API_PORT}/schema)",
        f"  events           ws://127.0.0.1:{GATEWAY_PORT}/ws/events  "
        f"http://127.0.0.1:{GATEWAY_PORT}/sse/events",
    ]
    if "traces" in running:
        lines.append(
            f"  traces           http://127.0.0.1:{TRACES_UI_PORT}/  (every submit and attempt)"
        )
    if "prometheus" in running:
        lines.append(
            f"  Prometheus       http://127.0.0.1:{PROMETHEUS_PORT}/  (scrapes every process)"
        )
    lines += [
        f"  worker metrics   http://127.0.0.1:{WORKER_METRICS_PORT}/metrics  (liveness: /health)",
        f"  scheduler        http://127.0.0.1:{SCHEDULER_METRICS_PORT}/metrics, "
        f"http://127.0.0.1:{SCHEDULER_METRICS_PORT + REPLICA_PORT_STEP}/metrics  "
        "(liveness: /health)",
        "Submit a first task from another terminal:",
        f"  curl -s -X POST http://127.0.0.1:{API_PORT}/api/v1/tasks "
        "-H 'Content-Type: application/json' \\",
        '       -d \'{"task": "examples.add", "args": [1, 2]}\'',
        f"  DTQ_REDIS_URL={url} uv run dtq enqueue examples.add --args '[1, 2]' --wait 10",
        f"  DTQ_REDIS_URL={url} uv run dtq status",
        "",
    ]
    return "\n".join(lines)


@dataclass
class RestartPolicy:
    """When a service that exited is started again: compose's ``restart: unless-stopped``,
    with Docker's doubling delay, and a limit, so a service that cannot start (a port in use,
    a broken setting) stops the stack with an error instead of looping for ever.

    The delay starts at ``first_delay_s`` and doubles after each exit up to ``max_delay_s``;
    a run of ``reset_after_s`` or longer starts it over. ``max_exits`` exits within
    ``window_s`` seconds is a service that keeps failing: :meth:`exited` returns ``None``.
    """

    first_delay_s: float = 0.5
    max_delay_s: float = 30.0
    reset_after_s: float = 30.0
    max_exits: int = 5
    window_s: float = 60.0
    exits: list[float] = field(default_factory=list)
    delay_s: float = 0.0

    def exited(self, now: float, ran_for_s: float) -> float | None:
        """Record an exit at ``now`` (monotonic) after ``ran_for_s`` seconds of running.

        Returns:
            The delay before the next start, or ``None`` when the service keeps failing.
        """
        if ran_for_s >= self.reset_after_s:
            self.delay_s = 0.0
        self.exits = [t for t in self.exits if now - t < self.window_s] + [now]
        if len(self.exits) >= self.max_exits:
            return None
        self.delay_s = (
            self.first_delay_s if self.delay_s == 0 else min(self.max_delay_s, self.delay_s * 2)
        )
        return self.delay_s

    @property
    def recent_exits(self) -> int:
        return len(self.exits)


@dataclass
class Child:
    """A long-running service under supervision: its current process and restart state."""

    svc: Service
    env: dict[str, str]
    policy: RestartPolicy
    proc: subprocess.Popen[bytes]
    color: str
    started_at: float = field(default_factory=time.monotonic)
    restart_at: float | None = None
    """When the service is due to start again (it exited); ``None`` while it runs."""


class Supervisor:
    """Runs the processes, interleaves their output (one colored prefix per service), and
    starts again a service that exited, announcing it in the combined log."""

    def __init__(
        self,
        out: TextIO | None = None,
        policy: Callable[[], RestartPolicy] = RestartPolicy,
    ) -> None:
        self.sel = selectors.DefaultSelector()
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.children: list[Child] = []
        self.stopping = False
        self.width = 14
        self.out = out or sys.stdout
        self.policy = policy

    def say(self, text: str) -> None:
        """A line of the runner's own in the combined log."""
        self.out.write(text + "\n")
        self.out.flush()

    def watch(self, name: str, proc: subprocess.Popen[bytes], color: str | None = None) -> str:
        color = color or COLORS[len(self.procs) % len(COLORS)]
        self.procs.append((name, proc))
        if proc.stdout is not None:
            self.sel.register(proc.stdout, selectors.EVENT_READ, (name, color))
        return color

    def _spawn(self, svc: Service, env: dict[str, str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            executable(svc.command),
            env={**env, **svc.env},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Own session: a terminal's Ctrl-C reaches the runner only, which sends one
            # SIGTERM (a second signal would make a worker exit without draining).
            start_new_session=True,
        )

    def launch(self, svc: Service, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start a one-shot service (the caller waits for it)."""
        proc = self._spawn(svc, env)
        self.watch(svc.name, proc)
        return proc

    def supervise(self, svc: Service, env: dict[str, str]) -> Child:
        """Start a long-running service, to be started again whenever it exits."""
        proc = self._spawn(svc, env)
        color = self.watch(svc.name, proc)
        child = Child(svc, dict(env), self.policy(), proc, color)
        self.children.append(child)
        return child

    def copy_output(self, timeout: float) -> int:
        """Copy the lines ready within ``timeout`` seconds; returns how many pipes were ready."""
        events = self.sel.select(timeout=timeout)
        for key, _ in events:
            name, color = key.data
            line = key.fileobj.readline()  # type: ignore[union-attr]
            if not line:
                self.sel.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
                continue
            text = line.decode(errors="replace")
            self.out.write(f"\033[{color}m{name:<{self.width}}|\033[0m {text}")
        self.out.flush()
        return len(events)

    def drain(self) -> None:
        """Copy what is already written (a dead process's last lines), without waiting."""
        for _ in range(10_000):
            if not self.copy_output(0):
                return

    def run_oneshot(self, svc: Service, env: dict[str, str]) -> int:
        """Run a one-shot service to its end, its output in the combined log."""
        proc = self.launch(svc, env)
        while proc.poll() is None and not self.stopping:
            self.copy_output(0.2)
        self.copy_output(0)
        self.procs.remove((svc.name, proc))
        if proc.stdout is not None:
            with contextlib.suppress(KeyError, ValueError):  # already unregistered at its EOF
                self.sel.unregister(proc.stdout)
        if proc.poll() is None:
            proc.terminate()
        return proc.wait()

    def step(self, timeout: float = 0.5) -> str | None:
        """Copy output for up to ``timeout`` seconds, then look after every service: announce
        an exit and plan its restart, start again those that are due.

        Returns:
            Why the stack must stop (a service keeps failing), or ``None``.
        """
        now = time.monotonic()
        due = [c.restart_at - now for c in self.children if c.restart_at is not None]
        self.copy_output(max(0.0, min([timeout, *due])))
        for child in self.children:
            if self.stopping:
                return None
            if child.restart_at is None:
                reason = self._check(child)
                if reason is not None:
                    return reason
            elif time.monotonic() >= child.restart_at:
                self._restart(child)
        return None

    def _check(self, child: Child) -> str | None:
        code = child.proc.poll()
        if code is None:
            return None
        self.drain()
        now = time.monotonic()
        name = child.svc.name
        delay = child.policy.exited(now, now - child.started_at)
        status = describe_exit(code)
        policy = child.policy
        if delay is None:
            return (
                f"{name} exited {policy.recent_exits} times within {policy.window_s:g} s "
                f"(last: {status})"
            )
        self.say(
            f"{name} exited ({status}); restarting it in {delay:g} s "
            f"({policy.recent_exits} of {policy.max_exits} exits allowed within "
            f"{policy.window_s:g} s)"
        )
        child.restart_at = now + delay
        return None

    def _restart(self, child: Child) -> None:
        old = child.proc
        self.procs.remove((child.svc.name, old))
        child.proc = self._spawn(child.svc, child.env)
        self.watch(child.svc.name, child.proc, child.color)
        child.started_at = time.monotonic()
        child.restart_at = None
        self.say(f"{child.svc.name} restarted (pid {child.proc.pid}, was {old.pid})")

    def pump(self) -> str | None:
        """Supervise until a signal arrives; returns why the stack must stop, if it must."""
        while not self.stopping:
            reason = self.step()
            if reason is not None:
                return reason
        return None

    def stop(self, redis: list[tuple[str, subprocess.Popen[bytes]]] | None = None) -> None:
        """SIGTERM every service (workers drain), then the Redis processes last, one after
        the other in the order given (sentinels before the nodes they watch)."""
        ours = {id(p) for _, p in redis or []}
        services = [(n, p) for n, p in self.procs if id(p) not in ours]
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
                self.out.write(f"{name:<{self.width}}| {line}\n")
        for _, proc in redis or []:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.drain()  # the last lines Redis wrote as it stopped


def describe_exit(code: int) -> str:
    """``status 1``, or ``killed by SIGKILL`` for a negative return code."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"status {code}"


def pid_file() -> Path:
    """Where a running ``just up`` notes its process id, for ``just down``."""
    return DATA / "up.pid"


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (an exited process its parent has not reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def down(timeout: float = 100.0) -> int:
    """``just down``: SIGTERM the ``just up`` whose data is in ``DATA`` (as Ctrl-C would) and
    wait until it has stopped everything."""
    try:
        pid = int(pid_file().read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        sys.stdout.write(f"no `just up` is running with its data in {DATA}\n")
        return 0
    if b"run.py" not in cmdline:  # the id was reused by another process since
        sys.stdout.write(f"no `just up` is running with its data in {DATA}\n")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            sys.stdout.write(f"`just up` (pid {pid}) is still stopping after {timeout:g} s\n")
            return 1
        time.sleep(0.1)
    sys.stdout.write(f"stopped `just up` (pid {pid})\n")
    return 0


def main() -> int:
    global DATA  # noqa: PLW0603 - one setting read by every helper above
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument(
        "--data", type=Path, default=DATA, help="where Redis, nginx and Prometheus keep state"
    )
    parser.add_argument(
        "--redis",
        choices=TOPOLOGIES,
        default="standalone",
        help="one redis-server (default; or DTQ_REDIS_URL when it answers), a local Redis "
        "Cluster of 3 masters and 3 replicas, or a master, a replica and 3 sentinels",
    )
    parser.add_argument(
        "--down", action="store_true", help="stop the `just up` running with this --data"
    )
    args = parser.parse_args()
    DATA = args.data.resolve()
    if args.down:
        return down()

    url, redis_procs, where = start_topology(
        args.redis, os.environ.get("DTQ_REDIS_URL", "redis://localhost:6379/0")
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    sup = Supervisor()

    def on_signal(signum: int, _frame: object) -> None:
        sup.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    for name, proc in redis_procs:
        sup.watch(name, proc)
    DATA.mkdir(parents=True, exist_ok=True)
    pid_file().write_text(str(os.getpid()))
    services = stack(url, args.workers)
    running: set[str] = set()
    try:
        for svc in services:
            if sup.stopping:
                break
            reason = prepare(svc, services)
            if reason is not None:
                sys.stdout.write(f"not starting {svc.name}: {reason}\n")
                continue
            if svc.oneshot:
                code = sup.run_oneshot(svc, env)
                if code != 0:
                    sys.stdout.write(f"stopping: {svc.name} exited with {code}\n")
                    return 1
                continue
            sup.supervise(svc, env)
            running.add(svc.compose)
            if svc.name == "traces":
                # Every later process exports its spans there, within a second.
                env["DTQ_OTLP_ENDPOINT"] = f"http://127.0.0.1:{OTLP_PORT}"
                env.setdefault("OTEL_BSP_SCHEDULE_DELAY", "1000")
                # The dashboard's task page (and `dtq task show`) link to it.
                env.setdefault("DTQ_TRACE_URL", TRACE_URL)
        sys.stdout.write(banner(url, where, running))
        sys.stdout.flush()
        failing = sup.pump()
        if failing:
            sys.stdout.write(f"stopping: {failing}; it keeps failing, see its lines above\n")
            return 1
    finally:
        sup.stop(redis_procs)
        pid_file().unlink(missing_ok=True)
        sys.stdout.write("dtq stopped\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
