"""Redis that hangs (B5) or refuses connections (B4/B12), longer than the client's socket
timeout. No API request hangs past its deadline: /health answers at once, /ready and submits
answer 503; a submit whose reply was lost is made safe by its idempotency key (one task,
whether or not the lost one was written); workers and schedulers ride it out in the same
process, backing off without spinning, and run new work once Redis answers again."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from dtq_core.infra.connection import SOCKET_TIMEOUT_S, connect
from dtq_devtools.testing import RedisServer, free_port, wait_until_sync
from dtq_devtools.testing.history import Check, check_history
from dtq_devtools.testing.processes import FAST_ENV, ServiceProcess, services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

HANG_S = SOCKET_TIMEOUT_S + 5
OUTAGE_S = 6.0


def timed(http: httpx.Client, method: str, path: str, **kwargs: object) -> tuple[int, float]:
    started = time.monotonic()
    r = http.request(method, path, **kwargs)  # type: ignore[arg-type]
    return r.status_code, time.monotonic() - started


def history(url: str, accepted: list[str]) -> Check:
    """The checker, from a synchronous test."""

    async def run() -> Check:
        redis = connect(url)
        try:
            return await check_history(redis, accepted)
        finally:
            await redis.aclose()

    return asyncio.run(run())


def ready_now(http: httpx.Client) -> bool:
    try:
        return http.get("/ready", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_a_hung_redis_times_out_every_call_and_nothing_is_doubled(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    assert server.proc is not None
    port = free_port()
    api = ServiceProcess(
        "dtq_ingest_api",
        [],
        {**FAST_ENV, "DTQ_REDIS_URL": server.url, "DTQ_API_PORT": str(port)},
        tmp_path / "api.log",
    )
    worker = worker_process(server.url, tmp_path / "worker.log")
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=SOCKET_TIMEOUT_S + 10)
    body = {"task": "noop", "idempotency_key": "hang-1"}
    resumed = threading.Event()
    try:
        with services(api, worker):
            wait_until_sync(lambda: ready_now(http), timeout=30, interval=0.1)
            pid = worker.pid

            os.kill(server.proc.pid, signal.SIGSTOP)
            resume = threading.Timer(
                HANG_S, lambda: (os.kill(server.proc.pid, signal.SIGCONT), resumed.set())
            )  # type: ignore[union-attr]
            resume.start()
            health = timed(http, "GET", "/health")
            ready = timed(http, "GET", "/ready")
            submit = timed(http, "POST", "/api/v1/tasks", json=body)
            # Ordering, not speed: every call was answered while Redis still hung.
            assert not resumed.is_set(), "Redis resumed before the calls timed out"
            assert health[0] == 200
            assert health[1] < SOCKET_TIMEOUT_S  # it never waited on Redis
            assert ready[0] == 503
            assert ready[1] < SOCKET_TIMEOUT_S  # its own probe deadline, not the socket's
            assert submit[0] == 503

            resumed.wait(HANG_S + 5)
            # The lost submit may or may not have been written: resubmitting with the same
            # key gives one task either way.
            again = http.post("/api/v1/tasks", json=body)
            assert again.status_code in (200, 201), again.text
            task_id = again.json()["id"]
            outcome = http.get(f"/api/v1/tasks/{task_id}/result", params={"wait": 15})
            assert outcome.json()["status"] == "succeeded"
            listed = http.get("/api/v1/tasks", params={"queue": "default"}).json()["items"]
            assert [t["id"] for t in listed] == [task_id]
            assert worker.alive()
            assert worker.pid == pid
        check = history(server.url, [task_id])
        faults.record(
            "B5 redis hangs (SIGSTOP) past the socket timeout",
            check,
            hang_s=HANG_S,
            health_s=round(health[1], 3),
            ready=ready[0],
            ready_s=round(ready[1], 3),
            submit=submit[0],
            submit_s=round(submit[1], 3),
            lost_submit_written=again.status_code == 200,
            tasks=len(listed),
        )
        check.assert_clean()
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        http.close()
        server.stop()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_while_redis_refuses_connections_workers_back_off_without_spinning(
    tmp_path: Path, faults: FaultFigures
) -> None:
    """B4/B12: Redis down (connections refused) for 6 s. The worker and the scheduler retry
    with capped backoff instead of spinning (CPU measured from /proc), stay up, and go on by
    themselves when Redis is back."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    worker = worker_process(server.url, tmp_path / "worker.log")
    scheduler = ServiceProcess(
        "dtq_scheduler_leader", [], {**FAST_ENV, "DTQ_REDIS_URL": server.url}, tmp_path / "s.log"
    )
    port = free_port()
    api = ServiceProcess(
        "dtq_ingest_api",
        [],
        {**FAST_ENV, "DTQ_REDIS_URL": server.url, "DTQ_API_PORT": str(port)},
        tmp_path / "api.log",
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        with services(worker, scheduler, api):
            wait_until_sync(lambda: ready_now(http), timeout=30, interval=0.1)
            server.stop()
            before = {p.module: _cpu_s(p.pid) for p in (worker, scheduler)}
            time.sleep(OUTAGE_S)  # the outage itself: this test measures what happens in it
            used = {
                p.module: round(_cpu_s(p.pid) - before[p.module], 2) for p in (worker, scheduler)
            }
            refused = http.post("/api/v1/tasks", json={"task": "noop"})
            server.start()
            wait_until_sync(lambda: ready_now(http), timeout=30, interval=0.1)
            created = http.post("/api/v1/tasks", json={"task": "noop"})
            outcome = http.get(f"/api/v1/tasks/{created.json()['id']}/result", params={"wait": 15})
            task_id = created.json()["id"]
            assert worker.alive()
            assert scheduler.alive()
        check = history(server.url, [task_id])
        faults.record(
            "B4/B12 redis refuses connections for 6 s",
            check,
            outage_s=OUTAGE_S,
            cpu_s=used,
        )
        check.assert_clean()
        assert refused.status_code == 503
        assert outcome.json()["status"] == "succeeded"
        # Capped backoff, not a reconnect loop: a spinning process burns most of a core; a
        # quarter of one is a generous bound on a shared machine (the figure is recorded).
        assert all(seconds < OUTAGE_S / 4 for seconds in used.values()), used
    finally:
        http.close()
        server.stop()
