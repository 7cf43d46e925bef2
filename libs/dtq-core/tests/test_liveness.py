"""``/health`` of the metrics port: what the checks decide (a test clock), and what the
listener answers over a real socket while the checks pass and fail."""

from __future__ import annotations

import asyncio
import json

import httpx
from prometheus_client import CollectorRegistry

from dtq_core.infra.liveness import MIN_LOOP_MAX_AGE_S, START_GRACE_S, TICK_S, Liveness
from dtq_core.infra.metrics import serve_metrics
from dtq_devtools.testing import free_port, wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def liveness(clock: Clock, max_age_s: float = 10.0) -> Liveness:
    return Liveness("heartbeat", max_age_s=max_age_s, clock=clock)


def body(live: Liveness) -> dict[str, object]:
    report = live.report()
    decoded: dict[str, object] = json.loads(report.body())
    assert (report.status == 200) == report.ok == (decoded["status"] == "ok")
    return decoded


def test_fresh_evidence_passes_and_names_every_check() -> None:
    clock = Clock()
    live = liveness(clock)
    sent = clock.now - 1.5
    live.watch(lambda: sent)
    clock.now += 0.25
    live.tick()
    assert body(live) == {
        "status": "ok",
        "checks": {
            "loop": {"ok": True, "age_s": 0.0, "max_age_s": 10.0},
            "heartbeat": {"ok": True, "age_s": 1.75, "max_age_s": 10.0},
        },
    }


def test_a_loop_that_stopped_ticking_fails_the_loop_check_only() -> None:
    clock = Clock()
    live = liveness(clock)
    live.tick()
    clock.now += 10.5
    live.watch(lambda: clock.now - 1.0)  # the round trips' evidence is fresh
    report = body(live)
    assert report["status"] == "unhealthy"
    assert report["failed"] == ["loop"]
    assert report["checks"] == {
        "loop": {"ok": False, "age_s": 10.5, "max_age_s": 10.0},
        "heartbeat": {"ok": True, "age_s": 1.0, "max_age_s": 10.0},
    }


def test_an_old_heartbeat_fails_and_a_new_one_recovers() -> None:
    clock = Clock()
    live = liveness(clock, max_age_s=10.0)
    last = [clock.now]
    live.watch(lambda: last[0])
    clock.now += 10.0
    live.tick()
    assert body(live)["status"] == "ok"  # the bound itself still passes
    clock.now += 0.1
    live.tick()
    assert body(live)["failed"] == ["heartbeat"]
    last[0] = clock.now
    assert body(live)["status"] == "ok"


def test_no_round_trip_yet_passes_for_the_start_grace_then_fails() -> None:
    clock = Clock()
    live = liveness(clock)
    clock.now += START_GRACE_S
    live.tick()
    report = body(live)
    assert report["status"] == "ok"
    assert report["checks"]["heartbeat"] == {  # type: ignore[index]
        "ok": True,
        "age_s": None,
        "max_age_s": 10.0,
        "starting": True,
    }
    clock.now += 0.1
    live.tick()
    report = body(live)
    assert report["failed"] == ["heartbeat"]
    assert report["checks"]["heartbeat"] == {  # type: ignore[index]
        "ok": False,
        "age_s": None,
        "max_age_s": 10.0,
    }


def test_the_bounds_never_go_below_their_floors() -> None:
    live = Liveness("heartbeat", max_age_s=0.5)
    assert live.loop_max_age_s == MIN_LOOP_MAX_AGE_S  # four ticks of the loop
    long = Liveness("redis", max_age_s=60.0, start_grace_s=1.0)
    assert long.loop_max_age_s == 60.0
    assert long.start_grace_s == 60.0  # a bound longer than the grace is the grace


async def test_ticking_stamps_from_the_running_loop_and_stops_with_the_block() -> None:
    clock = Clock()
    live = liveness(clock)
    clock.now += 5
    async with live.ticking():
        await wait_until(lambda: live.last_tick == clock.now, timeout=5)
        clock.now += TICK_S
        await wait_until(lambda: live.last_tick == clock.now, timeout=5)
    stopped = live.last_tick
    clock.now += 5
    await asyncio.sleep(TICK_S * 2)
    assert live.last_tick == stopped


def test_the_listener_answers_health_from_the_checks() -> None:
    clock = Clock()
    live = liveness(clock)
    live.watch(lambda: clock.now)
    port = free_port()
    # The listener thread lives as long as the test process (like prometheus_client's).
    serve_metrics(port, CollectorRegistry(), "127.0.0.9", setting="X", health=live)
    url = f"http://127.0.0.9:{port}"
    ok = httpx.get(f"{url}/health", timeout=5)
    assert ok.status_code == 200
    assert ok.headers["content-type"] == "application/json"
    assert ok.json()["status"] == "ok"
    clock.now += 11  # neither the loop nor the heartbeat has moved since
    failing = httpx.get(f"{url}/health", timeout=5)
    assert failing.status_code == 503
    assert failing.json()["failed"] == ["loop"]  # the watched heartbeat follows the clock
    metrics = httpx.get(f"{url}/metrics", timeout=5)
    assert metrics.status_code == 200
    assert metrics.headers["server"] == "dtq"  # not the Python version


def test_a_listener_without_checks_has_no_health() -> None:
    port = free_port()
    serve_metrics(port, CollectorRegistry(), "127.0.0.9", setting="X")
    assert httpx.get(f"http://127.0.0.9:{port}/health", timeout=5).status_code == 404
