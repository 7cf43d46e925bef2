"""B6: Redis restarts empty (no persistence). The API, a worker and a scheduler ride it out
without a restart: the API answers 503 (never 500) while Redis is away, the function library
and the consumer groups come back on first use, code-declared schedules fire again, and a task
from before the loss is reported as gone (404), not invented."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, free_port, wait_until_sync
from dtq_devtools.testing.history import Check, check_history
from dtq_devtools.testing.processes import FAST_ENV, ServiceProcess, services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow


def _status(http: httpx.Client, method: str, path: str, **kwargs: object) -> int:
    try:
        return http.request(method, path, **kwargs).status_code  # type: ignore[arg-type]
    except httpx.TransportError:
        return 0


def _run(http: httpx.Client, task: str = "noop") -> str:
    """Submit through the API and wait for the outcome; returns the task id."""
    created = http.post("/api/v1/tasks", json={"task": task})
    assert created.status_code == 201, created.text
    task_id: str = created.json()["id"]
    outcome = http.get(f"/api/v1/tasks/{task_id}/result", params={"wait": 15}, timeout=20)
    assert outcome.status_code == 200, outcome.text
    assert outcome.json()["status"] == "succeeded"
    return task_id


def _scheduled_succeeded(http: httpx.Client, ours: set[str]) -> bool:
    page = http.get("/api/v1/tasks", params={"queue": "default", "status": "succeeded"})
    return page.status_code == 200 and any(t["id"] not in ours for t in page.json()["items"])


def _history(url: str, accepted: list[str]) -> Check:
    async def run() -> Check:
        redis = connect(url)
        try:
            return await check_history(redis, accepted)
        finally:
            await redis.aclose()

    return asyncio.run(run())


def test_redis_restarting_empty_is_survived_without_restarts(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=False)
    server.start()
    port = free_port()
    env = {**FAST_ENV, "DTQ_REDIS_URL": server.url}
    api = ServiceProcess(
        "dtq_ingest_api", [], {**env, "DTQ_API_PORT": str(port)}, tmp_path / "api.log"
    )
    worker = worker_process(server.url, tmp_path / "worker.log")
    scheduler = ServiceProcess(
        "dtq_scheduler_leader",
        ["--app", "dtq_devtools.testing.app:ticking"],
        env,
        tmp_path / "scheduler.log",
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
    try:
        with services(api, worker, scheduler):
            wait_until_sync(lambda: _status(http, "GET", "/ready") == 200, timeout=30, interval=0.1)
            before = _run(http)
            wait_until_sync(lambda: _scheduled_succeeded(http, {before}), timeout=15, interval=0.2)
            pids = {p.module: p.pid for p in (api, worker, scheduler)}

            server.kill()
            down = {
                "health": _status(http, "GET", "/health"),
                "ready": _status(http, "GET", "/ready"),
                "submit": _status(http, "POST", "/api/v1/tasks", json={"task": "noop"}),
            }
            assert down == {"health": 200, "ready": 503, "submit": 503}

            started = time.monotonic()
            server.start()  # the same port and dir, and nothing in it
            wait_until_sync(
                lambda: _status(http, "GET", "/ready") == 200, timeout=30, interval=0.05
            )
            time_to_ready = time.monotonic() - started

            assert _status(http, "GET", f"/api/v1/tasks/{before}") == 404
            after = _run(http)
            wait_until_sync(
                lambda: _scheduled_succeeded(http, {before, after}), timeout=15, interval=0.2
            )
            assert {p.module: p.pid for p in (api, worker, scheduler)} == pids
            assert all(p.alive() for p in (api, worker, scheduler))
            restored = "schedules_restored" in scheduler.log_path.read_text()
        # The task from before the loss is gone by design (no persistence): only the one
        # submitted after it is accepted here; the schedule's own tasks are not ours.
        check = _history(server.url, [after])
        faults.record(
            "B6 redis restarts empty",
            check,
            time_to_ready_s=round(time_to_ready, 3),
            while_down=down,
            restarts=0,
            schedules_restored=restored,
        )
        check.assert_clean(allow_unexpected=True)
        assert restored
    finally:
        http.close()
        server.stop()
