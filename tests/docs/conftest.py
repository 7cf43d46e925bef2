"""The stack the docs' examples run against, started once for the module on free ports: the
suite's redis-server, the REST API twice (open, as `just up` runs it, and with a key per
scope, as docs/api.md's examples use it), the event gateway, a worker with the example tasks
of examples/ and a scheduler."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis as sync_redis

from dtq_core.infra.auth import new_key
from dtq_devtools.testing import RedisServer, free_port, wait_until_sync
from dtq_devtools.testing.processes import ServiceProcess, scheduler_process, worker_process
from tests.e2e.conftest import wait_ready

ROOT = Path(__file__).resolve().parents[2]
APP = "examples.tasks:registry"
KEY_NAMES = {"submit": "producer", "read": "reader", "admin": "operator"}
"""The key names docs/api.md shows (``whoami`` answers them)."""


@dataclass
class DocsStack:
    """Where each service of the docs' stack answers, and the keyed API's keys."""

    redis_url: str
    redis_dir: Path
    """The redis-server's data directory (``.data/redis`` of `just up`)."""
    open_api: str
    keyed_api: str
    gateway: str
    keys: dict[str, str]
    """Secret per scope (``submit``, ``read``, ``admin``) of the keyed API."""
    entries: str
    """The keyed API's ``DTQ_API_KEYS``."""
    logs: Path


@pytest.fixture(scope="module")
def docs_stack(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DocsStack]:
    if shutil.which("uv") is None:
        pytest.fail("uv is not on PATH: the docs' `uv run ...` commands need it")
    logs = tmp_path_factory.mktemp("docs-logs")
    url = redis_server.url
    # What earlier modules left (workers, queues, schedules) would show in the answers.
    with sync_redis.Redis.from_url(url) as client:
        client.flushall()
    keys: dict[str, str] = {}
    entries = []
    for scope, name in KEY_NAMES.items():
        keys[scope], entry = new_key(name, scope)
        entries.append(entry)
    ports = {"open": free_port(), "keyed": free_port(), "gateway": free_port()}
    common = {"DTQ_REDIS_URL": url, "DTQ_LOG_JSON": "true"}
    procs = [
        ServiceProcess(
            "dtq_ingest_api", [], {**common, "DTQ_API_PORT": str(ports["open"])}, logs / "api.log"
        ),
        ServiceProcess(
            "dtq_ingest_api",
            [],
            {**common, "DTQ_API_PORT": str(ports["keyed"]), "DTQ_API_KEYS": ",".join(entries)},
            logs / "api-keyed.log",
        ),
        ServiceProcess(
            "dtq_event_gateway",
            [],
            {**common, "DTQ_GATEWAY_PORT": str(ports["gateway"])},
            logs / "gateway.log",
        ),
        worker_process(
            url, logs / "worker.log", queues="default,emails,reports", app=APP, concurrency=8
        ),
        scheduler_process(url, logs / "scheduler.log"),
    ]
    try:
        for proc in procs:
            proc.start()
        for port, proc in zip(ports.values(), procs, strict=False):
            wait_ready(f"http://127.0.0.1:{port}/ready", proc)
        # Submits are checked against the tasks workers registered: wait for the worker.
        wait_until_sync(
            lambda: httpx.get(f"http://127.0.0.1:{ports['open']}/api/v1/workers").json()["items"],
            timeout=30,
            message="the examples worker registered",
        )
        yield DocsStack(
            redis_url=url,
            redis_dir=redis_server.data_dir,
            open_api=f"http://127.0.0.1:{ports['open']}",
            keyed_api=f"http://127.0.0.1:{ports['keyed']}",
            gateway=f"http://127.0.0.1:{ports['gateway']}",
            keys=keys,
            entries=",".join(entries),
            logs=logs,
        )
    finally:
        for proc in reversed(procs):
            proc.stop()
