"""The supervisor's decisions without processes: restart delays, crash loops, and what its
``/health`` says of a slot (tests/chaos/test_processes.py runs the real processes)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import msgspec
import pytest

from dtq_core.infra.settings import load_settings
from dtq_worker.supervisor import (
    CRASH_LOOP,
    RESTART_BACKOFF,
    STABLE_S,
    Supervisor,
    SupervisorReport,
    _slot_health,
)


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    s = Supervisor(load_settings({}), 2, "w:0a1b2c", lambda slot, fd: [])
    yield s
    shutil.rmtree(s.folder, ignore_errors=True)


def test_quick_exits_back_off_and_become_a_crash_loop(supervisor: Supervisor) -> None:
    slot = supervisor.slots[0]
    delays = []
    for _ in range(CRASH_LOOP):
        slot.started = time.monotonic()  # exits at once, every time
        delays.append(supervisor._next_delay(slot, 1))
    first, cap = RESTART_BACKOFF
    assert first * 0.8 <= delays[0] <= first
    assert delays == sorted(delays)  # doubling, jittered downwards by at most 20 %
    assert all(d <= cap for d in delays)
    assert slot.crash_loop
    assert slot.looping(time.monotonic())
    assert (
        supervisor.registry.get_sample_value("dtq_worker_process_restarts_total", {"slot": "0"})
        == CRASH_LOOP
    )
    assert supervisor.registry.get_sample_value("dtq_worker_process_crash_loops") == 1
    health = _slot_health(slot, None, time.monotonic())
    assert (health["ok"], health["state"], health["last_exit"]) == (
        False,
        "restarting",
        "exit status 1",
    )
    # A process that ran a minute before it exited starts the backoff again.
    slot.started = time.monotonic() - STABLE_S
    assert supervisor._next_delay(slot, -9) <= first
    assert not slot.crash_loop
    assert slot.last_exit == "killed by SIGKILL"


def test_a_slot_restarting_after_one_exit_is_healthy(supervisor: Supervisor) -> None:
    slot = supervisor.slots[1]
    slot.started = time.monotonic() - STABLE_S - 1
    supervisor._next_delay(slot, 1)
    assert _slot_health(slot, None, time.monotonic())["ok"] is True


def test_the_report_names_the_failed_slots_and_a_stuck_supervisor() -> None:
    slots = {"0": {"ok": True}, "1": {"ok": False, "state": "not answering"}}
    report = SupervisorReport(slots, loop_age_s=0.1)
    assert not report.ok
    body = msgspec.json.decode(report.body())
    assert (body["status"], body["failed"]) == ("unhealthy", ["process 1"])
    assert body["processes"]["1"]["state"] == "not answering"
    healthy = SupervisorReport({"0": {"ok": True}}, loop_age_s=0.1)
    assert healthy.ok
    assert "failed" not in msgspec.json.decode(healthy.body())
    stuck = SupervisorReport({"0": {"ok": True}}, loop_age_s=30.0)
    assert not stuck.ok
    assert msgspec.json.decode(stuck.body())["failed"] == ["supervisor"]
