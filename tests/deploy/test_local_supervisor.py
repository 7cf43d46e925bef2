"""``just up``'s supervisor (deploy/local/run.py) with real short-lived processes: a service
that exits is started again after a growing delay and the combined log says so; one that
keeps failing stops the stack with exit status 1."""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from dtq_devtools.testing import wait_until_sync
from tests.deploy.conftest import load_module

SLEEPER = "import os, time; print('up', os.getpid(), flush=True); time.sleep(120)"
CRASHER = "import sys; print('boom', flush=True); sys.exit(3)"


@pytest.fixture
def run() -> ModuleType:
    return load_module("deploy/local/run.py", "dtq_deploy_local_run")


@pytest.fixture
def supervisor(run: ModuleType) -> Iterator[tuple[Any, io.StringIO]]:
    """A supervisor writing to a buffer, with restart delays of a few hundredths of a second;
    every process it started is stopped at the end."""
    out = io.StringIO()
    sup = run.Supervisor(
        out, policy=lambda: run.RestartPolicy(first_delay_s=0.02, max_exits=3, window_s=60)
    )
    yield sup, out
    sup.stopping = True
    sup.stop(None)


def _service(run: ModuleType, name: str, code: str) -> Any:
    return run.Service(name, name, [sys.executable, "-c", code])


def _step_until(sup: Any, predicate: Callable[[], bool], message: str) -> None:
    """Let the supervisor work until ``predicate`` holds (it must not give up meanwhile)."""

    def done() -> bool:
        reason = sup.step(0.05)
        assert reason is None, reason
        return predicate()

    wait_until_sync(done, timeout=30, interval=0, message=message)


def test_a_killed_service_is_started_again_and_announced(
    run: ModuleType, supervisor: tuple[Any, io.StringIO]
) -> None:
    sup, out = supervisor
    child = sup.supervise(_service(run, "sleeper", SLEEPER), dict(os.environ))
    first = child.proc.pid
    _step_until(sup, lambda: f"up {first}" in out.getvalue(), "the first process runs")
    os.kill(first, signal.SIGKILL)  # a process this test started
    _step_until(
        sup,
        lambda: child.proc.pid != first and f"up {child.proc.pid}" in out.getvalue(),
        "a new process runs",
    )
    log = out.getvalue()
    assert (
        "sleeper exited (killed by SIGKILL); restarting it in 0.02 s (1 of 3 exits allowed "
        "within 60 s)"
    ) in log
    assert f"sleeper restarted (pid {child.proc.pid}, was {first})" in log
    assert child.proc.poll() is None
    # Its output still reaches the combined log under its own prefix.
    assert f"sleeper       |\033[0m up {child.proc.pid}" in log


def test_a_service_that_keeps_failing_stops_the_stack(
    run: ModuleType, supervisor: tuple[Any, io.StringIO]
) -> None:
    sup, out = supervisor
    sup.supervise(_service(run, "crasher", CRASHER), dict(os.environ))
    reasons: list[str] = []

    def gave_up() -> bool:
        reason = sup.step(0.05)
        if reason is not None:
            reasons.append(reason)
        return bool(reasons)

    wait_until_sync(gave_up, timeout=30, interval=0, message="the supervisor gives up")
    assert reasons == ["crasher exited 3 times within 60 s (last: status 3)"]
    log = out.getvalue()
    assert log.count("|\033[0m boom") == 3, log
    assert "crasher exited (status 3); restarting it in 0.02 s (1 of 3" in log
    assert "crasher exited (status 3); restarting it in 0.04 s (2 of 3" in log  # doubled


def test_the_restart_delay_doubles_is_capped_and_starts_over_after_a_long_run(
    run: ModuleType,
) -> None:
    policy = run.RestartPolicy(
        first_delay_s=1, max_delay_s=4, reset_after_s=30, max_exits=100, window_s=60
    )
    delays = [policy.exited(now=float(t), ran_for_s=0.1) for t in range(5)]
    assert delays == [1, 2, 4, 4, 4]
    assert policy.exited(now=10.0, ran_for_s=45.0) == 1  # it ran for a while: start over
    assert policy.exited(now=11.0, ran_for_s=0.1) == 2


def test_only_exits_within_the_window_count(run: ModuleType) -> None:
    policy = run.RestartPolicy(first_delay_s=1, max_exits=3, window_s=60)
    assert policy.exited(now=0.0, ran_for_s=1) is not None
    assert policy.exited(now=10.0, ran_for_s=1) is not None
    assert policy.exited(now=100.0, ran_for_s=1) is not None  # the first two have aged out
    assert policy.recent_exits == 1
    assert policy.exited(now=101.0, ran_for_s=1) is not None
    assert policy.exited(now=102.0, ran_for_s=1) is None  # three within a minute


def test_the_runner_exits_1_when_a_service_keeps_failing(
    run: ModuleType,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``main`` end to end on a one-service stack: the suite's Redis answers, so the runner
    starts none of its own."""
    monkeypatch.setenv("DTQ_REDIS_URL", redis_url)
    monkeypatch.setattr(sys, "argv", ["run.py", "--data", str(tmp_path / "data")])
    monkeypatch.setattr(run, "stack", lambda url, workers: [_service(run, "crasher", CRASHER)])
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = run.main()
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    log = capsys.readouterr().out
    assert code == 1
    assert "crasher exited (status 3); restarting it in 0.5 s (1 of 5" in log
    assert "stopping: crasher exited 5 times within 60 s (last: status 3)" in log
    assert log.rstrip().endswith("dtq stopped")
