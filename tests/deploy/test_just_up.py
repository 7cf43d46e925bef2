"""``just up`` end to end, on each Redis topology (``--redis standalone|cluster|sentinel``): the
runner starts the whole stack from a clean data dir, a task submitted with curl's request
through the dashboard's nginx runs, and shows up in Prometheus and in a trace; Ctrl-C stops
every process and frees every port (``just down`` does the same for the Sentinel run)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dtq_devtools.testing import free_port, wait_until_sync
from dtq_devtools.testing.tools import unavailable
from tests.deploy.conftest import ROOT, load_module, need_tool

pytestmark = pytest.mark.slow

BASE = "http://127.0.0.1:3000"
PROMETHEUS = "http://127.0.0.1:9090"
TRACES = "http://127.0.0.1:16686"


def _in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _get(url: str, timeout: float = 15) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback
            body = r.read()
            kind = r.headers.get("content-type", "")
            return r.status, json.loads(body) if "json" in kind else body.decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, None


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(  # noqa: S310 - loopback
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as r:  # noqa: S310 - loopback
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


URL_SCHEMES = {
    "standalone": "redis://",
    "cluster": "redis+cluster://",
    "sentinel": "redis+sentinel://",
}


class Runner:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, topology: str) -> None:
        self.proc = proc
        self.log = log
        self.topology = topology

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def topology_ports(topology: str) -> list[int]:
    """The fixed ports ``just up --redis topology`` starts Redis on (none for standalone: it
    takes a free one)."""
    local = load_module("deploy/local/redis_topologies.py", "dtq_deploy_local_redis_topologies")
    if topology == "cluster":
        return [*local.CLUSTER_PORTS, *(p + 10000 for p in local.CLUSTER_PORTS)]
    if topology == "sentinel":
        return [local.SENTINEL_MASTER_PORT, local.SENTINEL_REPLICA_PORT, *local.SENTINEL_PORTS]
    return []


@pytest.fixture(params=["standalone", "cluster", "sentinel"])
def runner(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Runner]:
    topology: str = request.param
    for tool in ("redis-server", "redis-cli", "nginx", "prometheus", "npm"):
        need_tool(tool)
    run = load_module("deploy/local/run.py", "dtq_deploy_local_run")
    ports = [s.port for s in run.stack("redis://x", 1) if s.port] + [run.OTLP_PORT]
    ports += topology_ports(topology)
    busy = [p for p in ports if _in_use(p)]
    if busy:
        unavailable(f"ports {busy} are in use (is a `just up` running?)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "OTEL_"))}
    env["DTQ_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "deploy/local/run.py"),
                "--data",
                str(tmp_path / "data"),
                "--redis",
                topology,
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    r = Runner(proc, log, topology)
    try:
        yield r
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_just_up_runs_the_stack_and_a_curl_task_is_seen_everywhere(runner: Runner) -> None:
    # The first run may build the dashboard with npm before anything starts.
    wait_until_sync(
        lambda: "dtq is running" in runner.output() or runner.proc.poll() is not None,
        timeout=300,
        message="the banner",
        interval=0.25,
    )
    assert runner.proc.poll() is None, runner.output()
    banner = runner.output()
    for url in (BASE, PROMETHEUS, TRACES, "http://127.0.0.1:8000/api/v1"):
        assert url in banner, url
    assert f"  Redis            {URL_SCHEMES[runner.topology]}127.0.0.1:" in banner
    wait_until_sync(
        lambda: _get(f"{BASE}/ready")[0] == 200, timeout=60, message="ready", interval=0.25
    )

    # curl -X POST through the dashboard's nginx, as the banner says.
    status, task = _post(f"{BASE}/api/v1/tasks", {"task": "examples.add", "args": [1, 2]})
    assert status == 201, task
    status, outcome = _get(f"{BASE}/api/v1/tasks/{task['id']}/result?wait=20", timeout=30)
    assert status == 200, outcome
    assert (outcome["status"], outcome["result"]) == ("succeeded", 3)

    status, page = _get(f"{BASE}/")
    assert status == 200
    assert '<div id="root">' in page

    def scraped() -> bool:
        status, body = _get(f"{PROMETHEUS}/api/v1/query?query=sum(dtq_tasks_total)")
        return (
            status == 200
            and bool(body["data"]["result"])
            and (float(body["data"]["result"][0]["value"][1]) >= 1)
        )

    wait_until_sync(scraped, timeout=60, message="the task in Prometheus", interval=0.25)

    def all_up() -> list[dict[str, Any]] | None:
        status, body = _get(f"{PROMETHEUS}/api/v1/targets")
        targets = body["data"]["activeTargets"] if status == 200 else []
        return targets if targets and all(t["health"] == "up" for t in targets) else None

    targets = wait_until_sync(all_up, timeout=60, message="every target up", interval=0.25)
    assert {t["labels"]["job"] for t in targets} == {
        "worker",
        "ingest-api",
        "event-gateway",
        "scheduler-leader",
    }

    def traced() -> list[dict[str, Any]] | None:
        status, body = _get(f"{TRACES}/api/traces?task_id={task['id']}")
        if status != 200 or not body["traces"]:
            return None
        spans = body["traces"][0]["spans"]
        kinds = {(s["kind"], s["service"]) for s in spans}
        wanted = {("PRODUCER", "dtq-ingest-api"), ("CONSUMER", "dtq-worker")}
        return spans if wanted <= kinds else None

    spans = wait_until_sync(traced, timeout=30, message="the task's trace", interval=0.25)
    assert len({s["trace_id"] for s in spans}) == 1
    status, page = _get(f"{TRACES}/trace/{spans[0]['trace_id']}")
    assert status == 200
    assert "process default" in page

    log = runner.output()
    for prefix in ("worker-1", "ingest-api", "event-gateway", "scheduler-1", "scheduler-2"):
        assert f"{prefix:<14}|" in log, prefix

    if runner.topology == "sentinel":
        # `just down` from another terminal; the other runs stop with Ctrl-C.
        data = runner.log.parent / "data"
        assert (data / "up.pid").read_text() == str(runner.proc.pid)
        done = subprocess.run(
            [sys.executable, str(ROOT / "deploy/local/run.py"), "--data", str(data), "--down"],
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"stopped `just up` (pid {runner.proc.pid})" in done.stdout
        assert not (data / "up.pid").exists()
    else:
        runner.proc.send_signal(signal.SIGINT)
    assert runner.proc.wait(90) == 0
    assert runner.output().rstrip().endswith("dtq stopped")
    ports = [8000, 8001, 8002, 8003, 3000, 9090, 4318, 16686, *topology_ports(runner.topology)]
    assert not [p for p in ports if _in_use(p)]
