"""Prometheus against a real dtq stack: DNS discovery finds every replica, the alert rules are
valid and fire, and every panel of the Grafana dashboard has data.

One stack for the module, on its own ``redis-server``: three workers, two schedulers, one
ingest API and one event gateway, each bound to a loopback address of its own
(``DTQ_METRICS_HOST``, ``DTQ_API_HOST``, ``DTQ_GATEWAY_HOST``) on the compose ports, as
replicas of a compose service are. A workload submits tasks that succeed, retry and die, fires
an interval schedule, and keeps a WebSocket client connected.

- The DNS test runs the compose ``prometheus.yml`` (intervals shortened) in a private mount
  namespace whose resolver is a DNS server of this process (needs root for port 53 and
  ``unshare``).
- The dashboard and alert tests run a second Prometheus with the same file, DNS discovery
  replaced by static targets, so they need no root.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from dtq_devtools.testing import RedisServer, free_port, wait_until_sync
from dtq_devtools.testing.processes import (
    FAST_ENV,
    ServiceProcess,
    scheduler_process,
    services,
    worker_process,
)

from .conftest import (
    GRAFANA_DIR,
    PROMETHEUS_DIR,
    DnsServer,
    Prometheus,
    fast_config,
    need_tool,
    running,
    skip_or_fail,
    write_config,
)

# The stack binds the compose ports (on loopback addresses of its own), which `just up`, the
# docs' examples and the containers bind too: one at a time (dtq_devtools.testing.plugin).
pytestmark = pytest.mark.fixed_ports

REPLICAS = {
    "worker": ["127.0.0.11", "127.0.0.12", "127.0.0.13"],
    "scheduler-leader": ["127.0.0.21", "127.0.0.22"],
    "ingest-api": ["127.0.0.31"],
    "event-gateway": ["127.0.0.41"],
}
"""Compose service name -> one loopback address per replica."""
PORTS = {"ingest-api": 8000, "worker": 8001, "event-gateway": 8002, "scheduler-leader": 8003}
"""The compose ports (the defaults of docs/configuration.md)."""
DNS_ADDRESS = "127.0.53.53"
QUEUE = "default"
DEAD = 4
RETRIED = 4
SUCCEEDED = 12
RATE_WINDOW = "1m"


@dataclass
class Stack:
    redis: RedisServer
    procs: list[ServiceProcess] = field(default_factory=list)

    @property
    def api(self) -> str:
        return f"http://{REPLICAS['ingest-api'][0]}:{PORTS['ingest-api']}"

    @property
    def gateway(self) -> str:
        return f"{REPLICAS['event-gateway'][0]}:{PORTS['event-gateway']}"

    def targets(self) -> dict[str, list[str]]:
        return {job: [f"{ip}:{PORTS[job]}" for ip in ips] for job, ips in REPLICAS.items()}

    def metrics_texts(self) -> dict[str, str]:
        return {
            target: httpx.get(f"http://{target}/metrics", timeout=5).text
            for targets in self.targets().values()
            for target in targets
        }

    def logs(self) -> str:
        return "\n".join(f"--- {p.module} ---\n{p.log()[-3000:]}" for p in self.procs)


def _check_free(address: str, port: int) -> None:
    with socket.socket() as s:
        # As the servers do: connections of a previous run in TIME_WAIT do not block a bind.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as exc:
            pytest.fail(
                f"{address}:{port} is taken ({exc.strerror}): the test binds the compose ports "
                f"on loopback addresses; stop whatever listens on port {port} (`just up`?)"
            )


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    need_tool("prometheus")
    for job, ips in REPLICAS.items():
        for ip in ips:
            _check_free(ip, PORTS[job])
    tmp = tmp_path_factory.mktemp("observability")
    redis = RedisServer(tmp / "redis")
    redis.start()
    url = redis.url
    fast = {"DTQ_QUEUE_METRICS_INTERVAL_S": "0.5"}
    stack = Stack(redis)
    for i, ip in enumerate(REPLICAS["worker"]):
        env = {"DTQ_METRICS_HOST": ip, "DTQ_WORKER_METRICS_PORT": "8001", "DTQ_WORKER_ID": f"w{i}"}
        stack.procs.append(worker_process(url, tmp / f"worker{i}.log", env={**fast, **env}))
    for i, ip in enumerate(REPLICAS["scheduler-leader"]):
        env = {"DTQ_METRICS_HOST": ip, "DTQ_SCHEDULER_METRICS_PORT": "8003"}
        stack.procs.append(scheduler_process(url, tmp / f"scheduler{i}.log", env={**fast, **env}))
    base = {**FAST_ENV, **fast, "DTQ_REDIS_URL": url}
    api = {"DTQ_API_HOST": REPLICAS["ingest-api"][0], "DTQ_API_PORT": "8000"}
    gateway = {"DTQ_GATEWAY_HOST": REPLICAS["event-gateway"][0], "DTQ_GATEWAY_PORT": "8002"}
    stack.procs.append(ServiceProcess("dtq_ingest_api", [], {**base, **api}, tmp / "api.log"))
    stack.procs.append(
        ServiceProcess("dtq_event_gateway", [], {**base, **gateway}, tmp / "gateway.log")
    )
    try:
        with services(*stack.procs):
            for targets in stack.targets().values():
                for target in targets:
                    try:
                        wait_until_sync(
                            partial(_answers, f"http://{target}/metrics"),
                            timeout=30,
                            interval=0.1,
                            message=f"{target}/metrics",
                        )
                    except TimeoutError:
                        pytest.fail(f"{target} did not serve /metrics\n{stack.logs()}")
            yield stack
    finally:
        redis.stop()


@pytest.fixture(scope="module")
def prometheus(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus with the compose file's jobs and rules, targets given statically."""
    tmp = tmp_path_factory.mktemp("prometheus-static")
    config = write_config(tmp / "config", fast_config(static_targets=stack.targets()))
    with running(Prometheus(config, free_port(), tmp / "data")) as prom:
        yield prom


def _value(prom: Prometheus, expr: str) -> float | None:
    result = prom.query(expr)
    return float(result[0]["value"][1]) if result else None


class EventReader:
    """A WebSocket client of the gateway, reading every frame in a thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.frames = 0
        self.socket: ClientConnection | None = None
        self.error: BaseException | None = None
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        if not self.connected.wait(10) or self.socket is None:
            raise RuntimeError(f"cannot connect to {url}: {self.error!r}")

    def _read(self) -> None:
        try:
            with ws_connect(self.url, open_timeout=10) as socket_:
                self.socket = socket_
                self.connected.set()
                for _ in socket_:
                    self.frames += 1
        except ConnectionClosed:
            return
        except OSError as exc:  # refused or reset: the test reports it
            self.error = exc
            self.connected.set()

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def workload(stack: Stack, prometheus: Prometheus) -> Iterator[EventReader]:
    """Tasks that succeed, retry and die; a schedule; a connected WebSocket client.

    The dead-letter gauge is seen at zero by Prometheus before any task dies, so the DLQ
    alert has growth to see.
    """
    api = httpx.Client(base_url=f"{stack.api}/api/v1", timeout=10)
    reader = EventReader(f"ws://{stack.gateway}/ws/events?queue={QUEUE}")
    try:
        put = api.put("/schedules/obs-tick", json={"task": "noop", "every_s": 1})
        assert put.status_code in (200, 201), put.text
        batch = [{"task": "echo", "args": [i], "queue": QUEUE} for i in range(SUCCEEDED)]
        reply = api.post("/tasks/batch", json={"tasks": batch})
        assert reply.status_code == 200, reply.text
        ids = [item["task"]["id"] for item in reply.json()["results"]]
        dead_zero = f'dtq_queue_dead{{queue="{QUEUE}"}} == 0'
        wait_until_sync(lambda: prometheus.query(dead_zero), timeout=20, message="dead == 0")
        for _ in range(DEAD):
            r = api.post("/tasks", json={"task": "fail", "queue": QUEUE, "max_attempts": 2})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        for _ in range(RETRIED):
            body = {"task": "retry_after", "queue": QUEUE, "kwargs": {"delay_s": 0.2}}
            r = api.post("/tasks", json=body)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])

        def finished() -> bool:
            states = [api.get(f"/tasks/{task_id}").json()["status"] for task_id in ids]
            return all(s in ("succeeded", "dead") for s in states)

        wait_until_sync(finished, timeout=20, interval=0.2, message="every task finished")
        wait_until_sync(
            lambda: _value(prometheus, f'dtq_queue_dead{{queue="{QUEUE}"}}') == DEAD,
            timeout=20,
            message="Prometheus sees the dead tasks",
        )
        wait_until_sync(lambda: reader.frames > 0, timeout=10, message="events received")
        yield reader
    finally:
        reader.close()
        api.close()


# -- the rules and the configuration ------------------------------------------------------


def test_promtool_accepts_the_config_and_the_rules() -> None:
    promtool = need_tool("promtool")
    for args in (["check", "config"], ["check", "rules"]):
        target = "prometheus.yml" if args[1] == "config" else "alerts.yml"
        done = subprocess.run(
            [promtool, *args, target],
            cwd=PROMETHEUS_DIR,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    wanted = {
        "DtqNoSchedulerLeader",
        "DtqDeadLettersGrowing",
        "DtqOldestTaskTooOld",
        "DtqWorkersStale",
        "DtqRedisErrors",
        "DtqApi5xxRate",
        "DtqGatewayGaps",
    }
    assert wanted <= names


def test_compose_config_discovers_each_service_by_dns() -> None:
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(PORTS)
    for name, job in jobs.items():
        (sd,) = job["dns_sd_configs"]
        assert sd == {**sd, "names": [name], "type": "A", "port": PORTS[name]}
        assert {"source_labels": ["__address__"], "target_label": "instance"} in job[
            "relabel_configs"
        ]
        assert "static_configs" not in job


# -- DNS service discovery ----------------------------------------------------------------


def test_dns_discovery_finds_every_replica(stack: Stack, tmp_path: Path) -> None:
    if subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode:
        skip_or_fail("unshare -m failed: the DNS discovery test needs root")
    dns = DnsServer(DNS_ADDRESS, REPLICAS)
    try:
        dns.start()
    except OSError as exc:
        skip_or_fail(f"cannot bind {DNS_ADDRESS}:53 for the test's DNS server ({exc.strerror})")
    try:
        resolv = tmp_path / "resolv.conf"
        resolv.write_text(f"nameserver {DNS_ADDRESS}\noptions timeout:1 attempts:2\n")
        config = write_config(tmp_path / "config", fast_config())
        prom = Prometheus(config, free_port(), tmp_path / "data", resolv_conf=resolv)
        with running(prom):

            def healthy() -> dict[str, set[str]]:
                up: dict[str, set[str]] = {}
                for t in prom.api("targets", state="active")["activeTargets"]:
                    if t["health"] == "up":
                        up.setdefault(t["labels"]["job"], set()).add(t["labels"]["instance"])
                return up

            want = {job: set(t) for job, t in stack.targets().items()}
            try:
                wait_until_sync(lambda: healthy() == want, timeout=20, interval=0.2)
            except TimeoutError:
                pytest.fail(f"targets {healthy()} != {want}\n{prom.log()[-3000:]}")
            wait_until_sync(
                lambda: _value(prom, 'count(up{job="worker"} == 1)') == 3,
                timeout=10,
                message="three worker series",
            )
            assert _value(prom, 'count(up{job="scheduler-leader"} == 1)') == 2
            # One leader among the replicas, and the queue gauges come from it alone.
            wait_until_sync(
                lambda: prom.query("count by (instance) (dtq_workers_registered)"),
                timeout=10,
                message="queue gauges scraped",
            )
            assert _value(prom, "sum(dtq_scheduler_is_leader)") == 1
            assert _value(prom, "count(count by (instance) (dtq_workers_registered))") == 1
            assert _value(prom, 'sum(dtq_workers_registered{state="running"})') == 3
    finally:
        dns.stop()
    assert {"worker", "scheduler-leader", "ingest-api", "event-gateway"} <= set(dns.queries)


# -- alerts -------------------------------------------------------------------------------


def test_dead_letter_alert_fires_and_no_leader_alert_does_not(
    prometheus: Prometheus, workload: EventReader
) -> None:
    def alerts() -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for a in prometheus.api("alerts")["alerts"]:
            out.setdefault(a["labels"]["alertname"], []).append(a)
        return out

    firing = wait_until_sync(
        lambda: [
            a
            for a in alerts().get("DtqDeadLettersGrowing", [])
            if a["state"] == "firing" and a["labels"].get("queue") == QUEUE
        ],
        timeout=15,
        message="DtqDeadLettersGrowing firing",
    )
    assert firing[0]["labels"]["severity"] == "warning"
    current = alerts()
    # A leader leads and workers are registered: the alerts about them stay silent.
    assert "DtqNoSchedulerLeader" not in current
    assert "DtqWorkWithoutWorkers" not in current


# -- the Grafana dashboard ----------------------------------------------------------------

DASHBOARD = GRAFANA_DIR / "dashboards" / "dtq.json"
METRIC = re.compile(r"\b(dtq_[a-z0-9_]+|up)\b(?![(\"])")


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def exprs() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels() for t in p["targets"]]


def substitute(expr: str, queue: str) -> str:
    return (
        expr.replace("$__rate_interval", RATE_WINDOW)
        .replace("$__interval", RATE_WINDOW)
        .replace("$queue", queue)
    )


def test_dashboard_structure() -> None:
    dash = dashboard()
    provisioned = yaml.safe_load(
        (GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    (source,) = provisioned["datasources"]
    assert source["url"] == "http://prometheus:9090"
    uid = source["uid"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert dash["uid"] == "dtq-overview"
    for p in panels():
        assert p["datasource"]["uid"] == uid, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == uid, p["title"]
    for var in dash["templating"]["list"]:
        assert var["datasource"]["uid"] == uid
    titles = " ".join(p["title"].lower() for p in panels())
    for topic in ("finished", "duration", "wait", "priority", "oldest", "retries", "dead-letter"):
        assert topic in titles
    for topic in (
        "workers",
        "leader",
        "requests",
        "latency",
        "clients",
        "events",
        "gaps",
        "versions",
    ):
        assert topic in titles
    provider = yaml.safe_load((GRAFANA_DIR / "provisioning" / "dashboards" / "dtq.yml").read_text())
    assert provider["providers"][0]["type"] == "file"


def test_every_metric_named_exists(stack: Stack, workload: EventReader) -> None:
    exported: set[str] = set()
    for text in stack.metrics_texts().values():
        for line in text.splitlines():
            if line and not line.startswith("#"):
                exported.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    exported.add("up")
    used = {m for _, e in exprs() for m in METRIC.findall(e)}
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            used |= set(METRIC.findall(rule["expr"]))
            regex = re.search(r'__name__=~"([^"]+)"', rule["expr"])
            if regex:
                assert any(re.fullmatch(regex.group(1), m) for m in exported), rule["alert"]
    assert used - exported == set()
    for name in (
        "dtq_queue_depth",
        "dtq_queue_delayed",
        "dtq_queue_inflight",
        "dtq_queue_dead",
        "dtq_queue_oldest_age_seconds",
        "dtq_queue_paused",
        "dtq_task_duration_seconds_bucket",
        "dtq_task_wait_seconds_bucket",
        "dtq_scheduler_is_leader",
        "dtq_gateway_clients",
    ):
        assert name in exported


def test_every_panel_query_returns_data(prometheus: Prometheus, workload: EventReader) -> None:
    variable = dashboard()["templating"]["list"][0]
    assert variable["query"]["query"] == "label_values(dtq_queue_depth, queue)"
    assert QUEUE in prometheus.api("label/queue/values", **{"match[]": "dtq_queue_depth"})
    empty = [
        (title, substitute(expr, queue))
        for title, expr in exprs()
        for queue in ({".*", QUEUE} if "$queue" in expr else {".*"})
    ]

    def all_answer() -> bool:
        # A rate() needs two scrapes of a series: one that appeared late (the dead tasks'
        # counter) may take a scrape or two more on a slow machine.
        empty[:] = [(title, expr) for title, expr in empty if not prometheus.query(expr)]
        return not empty

    with contextlib.suppress(TimeoutError):
        wait_until_sync(all_answer, timeout=30, interval=0.5, message="every panel answers")
    assert empty == []
    # Spot checks that the numbers are the workload's, not merely present.
    assert _value(prometheus, 'sum(dtq_gateway_clients{transport="ws"})') == 1
    assert _value(prometheus, "sum(dtq_scheduler_is_leader)") == 1
    retried = _value(prometheus, 'sum(dtq_tasks_total{status="retrying"})')
    assert retried is not None
    assert retried >= RETRIED + DEAD
    assert _value(prometheus, 'sum(dtq_tasks_total{status="dead"})') == DEAD
    assert _value(prometheus, 'sum(dtq_workers_registered{state="running"})') == 3
    # Requests are counted under their route template, never their path with an id.
    by_template = 'sum(dtq_http_requests_total{route="/api/v1/tasks/{task_id}",status="200"})'
    polls = _value(prometheus, by_template)
    assert polls is not None
    assert polls >= DEAD + RETRIED + SUCCEEDED
