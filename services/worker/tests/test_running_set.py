"""The running set alone (no Redis: it starts handlers and hands outcomes to the finisher)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import StoredError
from dtq_core.protocol.scripts import Claimed, Finish, Held
from dtq_core.tasks import TaskContext, TaskRegistry
from dtq_worker.context import WorkerContext
from dtq_worker.executor import Execution, Executor
from dtq_worker.finisher import Finisher
from dtq_worker.metrics import WorkerMetrics
from dtq_worker.running import RunningSet
from dtq_worker.tasklog import TaskLog

QUEUE = "rs"


class Parts:
    """A running set with its finisher, and a handler that waits until released."""

    def __init__(self, settings: Settings, *, concurrency: int) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.room = asyncio.Event()
        registry = TaskRegistry()

        @registry.task(name="wait")
        async def wait(ctx: TaskContext) -> str:
            self.started.append(ctx.rand)
            await self.release.wait()
            return "done"

        # The finisher's calls are not made here: outcomes stay pending for the test to read.
        self.redis = connect(settings)
        metrics = WorkerMetrics()
        ctx = WorkerContext.create(
            settings,
            [QUEUE],
            consumer="w:0",
            redis=self.redis,
            blocking=self.redis,
            metrics=metrics,
        )
        self.finisher = Finisher(ctx, TaskLog(enabled=False, json=False))
        self.running = RunningSet(
            concurrency=concurrency,
            registry=registry,
            executor=Executor(settings, "w:0", concurrency),
            finisher=self.finisher,
            metrics=metrics,
            progress=_no_progress,
            room=self.room,
        )
        self.running.bind(asyncio.get_running_loop())

    def outcomes(self) -> dict[str, Finish]:
        return {f.held.rand: f for f, _ in self.finisher.batches.pending.get(QUEUE, [])}

    def held(self) -> list[str]:
        held: dict[str, list[Held]] = {QUEUE: []}
        self.running.hold_into(held)
        return sorted(h.rand for h in held[QUEUE])


async def _no_progress(ctx: TaskContext, value: float, message: str | None) -> bool:
    return True


def _execution(rand: str, *, timeout_ms: int = 60_000, max_attempts: int = 3) -> Execution:
    c = Claimed(rand, 5, "1-0", "1", 1, max_attempts, timeout_ms, "wait", "[]", "{}", "", 0)
    return Execution(QUEUE, c, Held(rand, 5, "1-0", "1"))


@pytest.fixture
async def parts() -> AsyncIterator[Parts]:
    p = Parts(load_settings({}), concurrency=1)
    yield p
    p.release.set()
    await asyncio.gather(*p.running.running_tasks(), return_exceptions=True)
    await p.redis.aclose()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_admitted_attempts_run_up_to_concurrency_and_the_rest_wait(parts: Parts) -> None:
    for rand in ("r1", "r2", "r3"):
        parts.running.admit(_execution(rand))
    await _settle()
    assert parts.started == ["r1"]
    assert (parts.running.running, parts.running.prefetched) == (1, 2)
    assert parts.held() == ["r1", "r2", "r3"]


async def test_an_ended_attempt_hands_its_outcome_over_and_the_next_starts(parts: Parts) -> None:
    for rand in ("r1", "r2"):
        parts.running.admit(_execution(rand))
    await _settle()
    parts.room.clear()
    parts.release.set()
    await _settle()
    assert parts.started == ["r1", "r2"]
    outcomes = parts.outcomes()
    assert {rand: f.outcome for rand, f in outcomes.items()} == {"r1": "ok", "r2": "ok"}
    assert outcomes["r1"].payload == '"done"'
    assert parts.room.is_set()
    assert (parts.running.running, parts.running.prefetched) == (0, 0)


async def test_nothing_starts_from_the_buffer_once_stopped(parts: Parts) -> None:
    for rand in ("r1", "r2"):
        parts.running.admit(_execution(rand))
    await _settle()
    parts.running.stop_starting()
    parts.release.set()
    await _settle()
    assert parts.started == ["r1"]
    assert [ex.claimed.rand for ex in parts.running.take_prefetched()] == ["r2"]
    assert parts.running.prefetched == 0


async def test_cancelling_a_prefetched_attempt_finishes_it_as_cancelled(parts: Parts) -> None:
    for rand in ("r1", "r2", "r3"):
        parts.running.admit(_execution(rand))
    await _settle()
    assert parts.running.cancel("r2", "cancel")
    assert parts.running.cancel("r3", "lease_lost")  # dropped: no outcome, it is not ours
    assert not parts.running.cancel("r9", "cancel")
    assert {rand: f.outcome for rand, f in parts.outcomes().items()} == {"r2": "cancel"}
    assert parts.held() == ["r1"]


async def test_cancelling_a_running_attempt_ends_it_with_the_reason(parts: Parts) -> None:
    parts.running.admit(_execution("r1"))
    await _settle()
    assert parts.running.cancel("r1", "cancel")
    await _settle()
    assert parts.outcomes()["r1"].outcome == "cancel"
    assert parts.running.running == 0


async def test_a_lost_lease_ends_the_attempt_without_an_outcome(parts: Parts) -> None:
    parts.running.admit(_execution("r1"))
    await _settle()
    assert parts.running.cancel("r1", "lease_lost")
    await _settle()
    assert parts.outcomes() == {}
    assert parts.running.running == 0


async def test_the_watchdog_fails_an_attempt_past_its_timeout(parts: Parts) -> None:
    parts.running.admit(_execution("r1", timeout_ms=100, max_attempts=1))
    watchdog = asyncio.create_task(parts.running.watch_deadlines())
    try:
        for _ in range(100):
            if parts.outcomes():
                break
            await asyncio.sleep(0.02)
    finally:
        watchdog.cancel()
    finish = parts.outcomes()["r1"]
    assert finish.outcome == "dead"
    error = msgspec.json.decode(finish.payload, type=StoredError)
    assert (error.type, error.reason) == ("TimeoutError", "timeout")


async def test_abandoned_handlers_are_cancelled_without_outcomes(parts: Parts) -> None:
    parts.running.admit(_execution("r1"))
    await _settle()
    assert [ex.claimed.rand for ex in parts.running.running_executions()] == ["r1"]
    tasks = parts.running.abandon("drain")
    await asyncio.wait(tasks, timeout=5)
    assert parts.outcomes() == {}
    assert parts.running.running == 0
