"""What each service process shows an operator, read from real processes: its whole output
is JSON lines with ``DTQ_LOG_JSON`` (uvicorn's, asyncio's and a handler's standard-library
lines and warnings included), its ``/metrics`` carries ``dtq_build_info`` and no ``_created``
series with ``le`` values as ``prometheus_client`` writes them, and the worker and the
scheduler answer ``/health`` from their loop and their Redis round trips.

One run for the module: a Redis of its own, the four services, some traffic (a task whose
handler logs through ``logging`` and warns, requests that uvicorn refuses itself), then a
SIGTERM to each, so that start-up and shutdown lines are part of what is read.
"""

from __future__ import annotations

import json
import signal
import socket
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from dtq_devtools.testing import RedisServer, free_port, wait_until_sync
from dtq_devtools.testing.processes import (
    FAST_ENV,
    ServiceProcess,
    scheduler_process,
    worker_process,
)

SERVICES = {
    # process -> (the service label of dtq_build_info, the distribution it reports)
    "ingest-api": ("dtq-ingest-api", "dtq-ingest-api"),
    "event-gateway": ("dtq-event-gateway", "dtq-event-gateway"),
    "worker": ("dtq-worker", "dtq-worker"),
    "scheduler-leader": ("dtq-scheduler", "dtq-scheduler-leader"),
}
MALFORMED = b"NOT-HTTP \x00\r\n\r\n"


@dataclass
class Run:
    """What the module's run saw."""

    metrics: dict[str, str] = field(default_factory=dict)
    health: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    exits: dict[str, int | None] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)


def get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2)
    except httpx.TransportError:
        return None


def answers(url: str, status: int = 200) -> bool:
    reply = get(url)
    return reply is not None and reply.status_code == status


def leases_seen(url: str) -> bool:
    """The scheduler's Redis check has evidence (not only its start-up grace)."""
    reply = get(url)
    return reply is not None and reply.json()["checks"]["redis"]["age_s"] is not None


def malformed(port: int) -> bytes:
    """Send bytes that are not HTTP: uvicorn refuses them before any app code runs."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(MALFORMED)
        return s.recv(4096)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("output")
    redis = RedisServer(tmp / "redis")
    redis.start()
    ports = {name: free_port() for name in SERVICES}
    local = {"DTQ_METRICS_HOST": "127.0.0.1"}
    procs = {
        "ingest-api": ServiceProcess(
            "dtq_ingest_api",
            [],
            {**FAST_ENV, "DTQ_REDIS_URL": redis.url, "DTQ_API_PORT": str(ports["ingest-api"])},
            tmp / "ingest-api.log",
        ),
        "event-gateway": ServiceProcess(
            "dtq_event_gateway",
            [],
            {
                **FAST_ENV,
                "DTQ_REDIS_URL": redis.url,
                "DTQ_GATEWAY_PORT": str(ports["event-gateway"]),
            },
            tmp / "event-gateway.log",
        ),
        "worker": worker_process(
            redis.url,
            tmp / "worker.log",
            env={**local, "DTQ_WORKER_METRICS_PORT": str(ports["worker"])},
        ),
        "scheduler-leader": scheduler_process(
            redis.url,
            tmp / "scheduler-leader.log",
            env={**local, "DTQ_SCHEDULER_METRICS_PORT": str(ports["scheduler-leader"])},
        ),
    }
    base = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    seen = Run()
    try:
        for proc in procs.values():
            proc.start()
        wait_until_sync(lambda: answers(f"{base['ingest-api']}/ready"), timeout=60)
        wait_until_sync(lambda: answers(f"{base['event-gateway']}/ready"), timeout=60)
        wait_until_sync(lambda: answers(f"{base['worker']}/health"), timeout=60)
        wait_until_sync(lambda: leases_seen(f"{base['scheduler-leader']}/health"), timeout=60)

        api = httpx.Client(base_url=base["ingest-api"], timeout=30)
        created = api.post("/api/v1/tasks", json={"task": "stdlib_log", "args": ["hello"]})
        assert created.status_code == 201, created.text
        task_id = created.json()["id"]
        seen.result = api.get(f"/api/v1/tasks/{task_id}/result", params={"wait": 20}).json()
        assert api.get("/no/such/route").status_code == 404
        api.close()
        for name in ("ingest-api", "event-gateway"):
            assert malformed(ports[name]).startswith(b"HTTP/1.1 400")
        for name in SERVICES:
            reply = httpx.get(f"{base[name]}/metrics", timeout=5)
            assert reply.status_code == 200
            seen.metrics[name] = reply.text
        for name in ("worker", "scheduler-leader"):
            reply = httpx.get(f"{base[name]}/health", timeout=5)
            seen.health[name] = (reply.status_code, reply.json())
    finally:
        for name, proc in procs.items():
            seen.exits[name] = proc.stop()
            seen.logs[name] = proc.log()
        redis.stop()
    return seen


@pytest.mark.parametrize("name", SERVICES)
def test_the_whole_output_is_json_lines(run: Run, name: str) -> None:
    # uvicorn ends its process by raising SIGTERM again once it has shut down.
    assert run.exits[name] in (0, -signal.SIGTERM), run.logs[name][-3000:]
    lines = run.logs[name].splitlines()
    assert lines
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"{name} line {number} is not JSON: {line!r}")
        assert {"event", "level", "timestamp"} <= record.keys(), line


def records(run: Run, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.logs[name].splitlines()]


def test_uvicorn_lines_and_refusals_are_among_them(run: Run) -> None:
    for name in ("ingest-api", "event-gateway"):
        uvicorn = [r for r in records(run, name) if r.get("logger", "").startswith("uvicorn")]
        events = [r["event"] for r in uvicorn]
        assert any(e.startswith("Started server process") for e in events), (name, events)
        assert any(e.startswith("Finished server process") for e in events), (name, events)
        assert "Invalid HTTP request received." in events, (name, events)


def test_a_handlers_stdlib_line_and_warning_carry_the_task(run: Run) -> None:
    assert run.result["status"] == "succeeded", run.result
    worker = records(run, "worker")
    said = [r for r in worker if r.get("logger") == "dtq_devtools.handler"]
    assert [r["event"] for r in said] == ["handler says hello"]
    assert said[0]["task_id"] == run.result["id"]
    assert said[0]["queue"] == "default"
    warned = [r for r in worker if r.get("logger") == "py.warnings"]
    assert len(warned) == 1
    assert "UserWarning: handler warns hello" in warned[0]["event"]


@pytest.mark.parametrize("name", SERVICES)
def test_metrics_have_build_info_and_no_created_series(run: Run, name: str) -> None:
    text = run.metrics[name]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    service, distribution = SERVICES[name]
    build = [(s.labels, s.value) for s in families["dtq_build_info"].samples]
    assert build == [({"service": service, "version": version(distribution)}, 1.0)]
    assert "_created" not in text


@pytest.mark.parametrize("name", SERVICES)
def test_bucket_bounds_are_written_as_the_client_library_writes_them(run: Run, name: str) -> None:
    les = {
        s.labels["le"]
        for f in text_string_to_metric_families(run.metrics[name])
        if f.type == "histogram"
        for s in f.samples
        if "le" in s.labels
    }
    if name != "event-gateway":  # its one histogram has samples once clients get events
        assert "1.0" in les, (name, les)
    for le in les:
        assert le == floatToGoString(float(le)), f"{name}: le={le!r}"  # 1.0, not 1


def test_worker_and_scheduler_are_healthy(run: Run) -> None:
    status, body = run.health["worker"]
    assert status == 200, body
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"loop", "heartbeat"}
    assert body["checks"]["heartbeat"]["age_s"] is not None
    status, body = run.health["scheduler-leader"]
    assert status == 200, body
    assert set(body["checks"]) == {"loop", "redis"}
