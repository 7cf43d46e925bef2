"""``/health`` proves liveness on real processes: a handler that blocks the worker's event loop
fails it (the metrics listener's thread still answers ``/metrics``, which is why compose no
longer probes that), and so does a Redis gone long enough for the worker's heartbeat and the
scheduler's lease calls to age past their bounds; both recover by themselves.

The figures (how long until the probe failed, how long it took to pass again) go to
``.artifacts/faults.jsonl``; only orderings and generous deadlines are asserted.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from dtq_core import SyncClient
from dtq_devtools.testing import RedisServer, free_port, wait_until_sync
from dtq_devtools.testing.processes import ServiceProcess, scheduler_process, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

BLOCK_S = 8.0
"""How long the handler holds the worker's loop: four times the loop bound of the fast knobs
(2 s), so the probe sees it fail with time to spare."""


def health(port: int) -> tuple[int, dict[str, Any]] | None:
    try:
        reply = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    except httpx.TransportError:
        return None
    return reply.status_code, reply.json()


def healthy(port: int, check: str) -> bool:
    """200, with evidence of a Redis round trip (not only the start-up grace)."""
    answer = health(port)
    return (
        answer is not None and answer[0] == 200 and answer[1]["checks"][check]["age_s"] is not None
    )


def failing(port: int, check: str) -> dict[str, Any] | None:
    """The body of a 503 that names ``check`` among the failed ones."""
    answer = health(port)
    if answer is not None and answer[0] == 503 and check in answer[1]["failed"]:
        return answer[1]
    return None


def metrics_answer(port: int) -> bool:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200


def listening(**env: str) -> dict[str, str]:
    return {"DTQ_METRICS_HOST": "127.0.0.1", **env}


def test_a_handler_that_blocks_the_loop_fails_health_until_it_lets_go(
    tmp_path: Any, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    port = free_port()
    worker = worker_process(
        server.url,
        tmp_path / "worker.log",
        env=listening(DTQ_WORKER_METRICS_PORT=str(port)),
    )
    try:
        worker.start()
        wait_until_sync(lambda: healthy(port, "heartbeat"), timeout=60, interval=0.1)
        with SyncClient.from_url(server.url) as client:
            client.enqueue("block_loop_once", args=[BLOCK_S])
        submitted = time.monotonic()
        body = wait_until_sync(
            lambda: failing(port, "loop"), timeout=BLOCK_S, interval=0.1, message="loop failed"
        )
        failed_after = time.monotonic() - submitted
        assert metrics_answer(port)  # the listener's thread answers all the while
        loop = body["checks"]["loop"]
        assert loop["age_s"] > loop["max_age_s"]
        assert body["status"] == "unhealthy"
        wait_until_sync(lambda: healthy(port, "heartbeat"), timeout=BLOCK_S + 30, interval=0.1)
        recovered_after = time.monotonic() - submitted
        assert worker.alive()
        assert recovered_after > failed_after
        faults.record(
            "a handler blocks the worker's event loop",
            block_s=BLOCK_S,
            failed_after_s=round(failed_after, 2),
            failed=body["failed"],
            loop_age_s=loop["age_s"],
            recovered_after_s=round(recovered_after, 2),
        )
    finally:
        worker.stop()
        server.stop()


def test_a_redis_gone_long_enough_fails_health_on_round_trip_age_and_recovers(
    tmp_path: Any, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    wport, sport = free_port(), free_port()
    worker = worker_process(
        server.url,
        tmp_path / "worker.log",
        env=listening(DTQ_WORKER_METRICS_PORT=str(wport)),
    )
    scheduler = scheduler_process(
        server.url,
        tmp_path / "scheduler.log",
        env=listening(DTQ_SCHEDULER_METRICS_PORT=str(sport)),
    )
    procs: list[ServiceProcess] = [worker, scheduler]
    try:
        for proc in procs:
            proc.start()
        wait_until_sync(lambda: healthy(wport, "heartbeat"), timeout=60, interval=0.1)
        wait_until_sync(lambda: healthy(sport, "redis"), timeout=60, interval=0.1)

        server.stop()
        stopped = time.monotonic()
        bodies = {
            "worker": wait_until_sync(lambda: failing(wport, "heartbeat"), 30, 0.1),
            "scheduler": wait_until_sync(lambda: failing(sport, "redis"), 30, 0.1),
        }
        failed_after = time.monotonic() - stopped
        for name, body in bodies.items():
            # The loops run: only the Redis evidence is old.
            assert body["failed"] == ["heartbeat" if name == "worker" else "redis"], body
            assert body["checks"]["loop"]["ok"], body

        server.start()
        started = time.monotonic()
        wait_until_sync(lambda: healthy(wport, "heartbeat"), timeout=30, interval=0.1)
        wait_until_sync(lambda: healthy(sport, "redis"), timeout=30, interval=0.1)
        recovered_after = time.monotonic() - started
        assert worker.alive()
        assert scheduler.alive()
        faults.record(
            "redis stopped until health fails, then started again",
            failed_after_s=round(failed_after, 2),
            worker_heartbeat_max_age_s=bodies["worker"]["checks"]["heartbeat"]["max_age_s"],
            scheduler_redis_max_age_s=bodies["scheduler"]["checks"]["redis"]["max_age_s"],
            recovered_after_s=round(recovered_after, 2),
        )
    finally:
        for proc in procs:
            proc.stop()
        server.stop()
