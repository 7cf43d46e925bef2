"""Outcome batching: the pure batches, and the finisher against real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis

from dtq_core import Client, TaskStatus
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings
from dtq_core.names import make_task_id
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.outcomes import FinishOutcome
from dtq_core.protocol.scripts import Claimed, Finish, Held, RunTimes, Scripts
from dtq_devtools.testing import wait_until
from dtq_worker.context import WorkerContext
from dtq_worker.executor import Execution
from dtq_worker.finisher import Finisher, OutcomeBatches, run_times
from dtq_worker.metrics import WorkerMetrics
from dtq_worker.tasklog import TaskLog

CONSUMER = "w-test:000000"


def _execution(queue: str, rand: str) -> Execution:
    c = Claimed(rand, 5, "1-0", "1", 1, 3, 1000, "t", "[]", "{}", "", 0)
    return Execution(queue, c, Held(rand, 5, "1-0", "1"))


def _outcome(queue: str, rand: str) -> tuple[Finish, Execution]:
    ex = _execution(queue, rand)
    return Finish(ex.held, "ok"), ex


def _rands(batch: Sequence[tuple[Finish, Execution]]) -> list[str]:
    return [f.held.rand for f, _ in batch]


# -- OutcomeBatches (pure) --------------------------------------------------------------------


def test_a_batchs_run_times_leave_out_cancelled_and_unstarted_attempts() -> None:
    now = time.perf_counter()
    ran = []
    for rand, outcome, started in [
        ("r1", FinishOutcome.OK, now - 2.0),
        ("r2", FinishOutcome.RETRY, now - 0.5),
        ("r3", FinishOutcome.CANCEL, now - 9.0),  # cancelled: its handler did not end itself
        ("r4", FinishOutcome.DEAD, 0.0),  # never started (a hand-made outcome)
    ]:
        ex = _execution("a", rand)
        ex.started = started
        ran.append((Finish(ex.held, outcome), ex))
    times = run_times(ran)
    assert times.count == 2
    assert 2_500_000 <= times.total_us < 3_500_000
    assert 2_000_000 <= times.longest_us < 2_500_000
    assert run_times([]) == RunTimes()


def test_a_call_takes_everything_pending_by_queue() -> None:
    batches = OutcomeBatches()
    for queue, rand in [("a", "r1"), ("b", "r2"), ("a", "r3")]:
        batches.add(queue, _outcome(queue, rand))
    taken = batches.take()
    assert {q: _rands(items) for q, items in taken.items()} == {"a": ["r1", "r3"], "b": ["r2"]}
    assert batches.pending == {}
    assert batches.waiting() == 0


def test_outcomes_added_during_a_call_wait_for_the_next_one() -> None:
    batches = OutcomeBatches()
    batches.add("a", _outcome("a", "r1"))
    batches.take()
    batches.add("a", _outcome("a", "r2"))
    batch = batches.next_batch()
    assert batch is not None
    assert _rands(batch[1]) == ["r1"]
    batches.sent("a")
    assert batches.next_batch() is None
    batches.call_ended()
    assert _rands(batches.take()["a"]) == ["r2"]


def test_what_a_failed_call_did_not_send_goes_first_next_time() -> None:
    batches = OutcomeBatches()
    batches.add("a", _outcome("a", "r1"))
    batches.add("b", _outcome("b", "r2"))
    batches.take()
    batches.sent("a")  # answered; then the call for b failed
    batches.add("b", _outcome("b", "r3"))
    batches.call_ended()
    assert {q: _rands(items) for q, items in batches.pending.items()} == {"b": ["r2", "r3"]}
    assert batches.in_flight == {}
    assert batches.waiting() == 2


def test_attempts_are_held_until_their_call_is_answered() -> None:
    batches = OutcomeBatches()
    batches.add("a", _outcome("a", "r1"))
    batches.take()
    batches.add("a", _outcome("a", "r2"))
    held: dict[str, list[Held]] = {"a": [], "b": []}
    batches.hold_into(held)
    assert sorted(h.rand for h in held["a"]) == ["r1", "r2"]
    batches.sent("a")
    held = {"a": [], "b": []}
    batches.hold_into(held)
    assert [h.rand for h in held["a"]] == ["r2"]


# -- Finisher against Redis -------------------------------------------------------------------


class GatedScripts(Scripts):
    """The real functions; each finish call is recorded, and the first waits for ``gate``."""

    def __init__(self, redis: aioredis.Redis) -> None:
        super().__init__(redis)
        self.calls: list[tuple[str, list[str]]] = []
        self.gate = asyncio.Event()

    async def finish(self, qk: QueueKeys, outcomes: Sequence[Finish], **kw: Any) -> list[str]:
        self.calls.append((qk.queue, [f.held.rand for f in outcomes]))
        if len(self.calls) == 1:
            await self.gate.wait()
        return await super().finish(qk, outcomes, **kw)


@pytest.fixture
async def ctx(settings: Settings, client: Client) -> AsyncIterator[WorkerContext]:
    redis = connect(settings)
    context = WorkerContext.create(
        settings,
        ["fa", "fb"],
        consumer=CONSUMER,
        redis=redis,
        blocking=redis,
        metrics=WorkerMetrics(),
    )
    yield dataclasses.replace(context, scripts=GatedScripts(redis))
    await redis.aclose()


async def _claim(client: Client, ctx: WorkerContext, queue: str, n: int) -> list[Execution]:
    handles = [await client.enqueue("t", args=[i], queue=queue) for i in range(n)]
    s = ctx.settings
    _, claimed = await ctx.scripts.claim(
        ctx.by_name[queue],
        consumer=CONSUMER,
        count=n,
        events_maxlen=s.queues.events_maxlen,
        retention_ms=s.tasks.retention_s * 1000,
    )
    assert sorted(make_task_id(queue, c.rand) for c in claimed) == sorted(h.id for h in handles)
    return [Execution(queue, c, Held(c.rand, c.priority, c.entry_id, c.lease)) for c in claimed]


async def test_outcomes_that_end_during_a_call_ride_in_the_next_one_per_queue(
    client: Client, ctx: WorkerContext
) -> None:
    scripts = ctx.scripts
    assert isinstance(scripts, GatedScripts)
    out = io.StringIO()
    finisher = Finisher(ctx, TaskLog(enabled=True, json=True, stream=out))
    a1, a2, a3 = await _claim(client, ctx, "fa", 3)
    b1, b2 = await _claim(client, ctx, "fb", 2)
    loop = asyncio.create_task(finisher.run())
    try:
        finisher.add("fa", Finish(a1.held, "ok", "1", ""), a1)
        await wait_until(lambda: scripts.calls, message="the first call is in flight")
        for ex in (a2, b1, a3, b2):
            finisher.add(ex.queue, Finish(ex.held, "ok", "2", ""), ex)
        held: dict[str, list[Held]] = {"fa": [], "fb": []}
        finisher.batches.hold_into(held)
        assert len(held["fa"]) == 3  # the one in flight is held too
        assert len(held["fb"]) == 2
        scripts.gate.set()
        await wait_until(lambda: finisher.processed == 5, message="every outcome recorded")
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
    assert scripts.calls == [
        ("fa", [a1.claimed.rand]),
        ("fa", [a2.claimed.rand, a3.claimed.rand]),
        ("fb", [b1.claimed.rand, b2.claimed.rand]),
    ]
    for ex in (a1, a2, a3, b1, b2):
        assert await _status(client, ex) is TaskStatus.SUCCEEDED
    get = ctx.metrics.registry.get_sample_value
    assert get("dtq_tasks_total", {"queue": "fa", "task": "t", "status": "succeeded"}) == 3
    assert get("dtq_task_duration_seconds_count", {"queue": "fb", "task": "t"}) == 2
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["status"] for line in lines] == ["succeeded"] * 5
    assert finisher.failed == 0


async def test_an_outcome_fenced_off_by_a_newer_lease_counts_as_stale(
    client: Client, ctx: WorkerContext
) -> None:
    scripts = ctx.scripts
    assert isinstance(scripts, GatedScripts)
    scripts.gate.set()
    finisher = Finisher(ctx, TaskLog(enabled=False, json=True))
    ok, stale, failed = await _claim(client, ctx, "fa", 3)
    wrong = dataclasses.replace(stale.held, lease=str(int(stale.held.lease) + 1))
    finisher.add("fa", Finish(ok.held, "ok"), ok)
    finisher.add("fa", Finish(wrong, "ok"), stale)
    finisher.add("fa", Finish(failed.held, "dead", '{"type": "ValueError"}'), failed)
    await finisher.flush()
    assert (finisher.processed, finisher.failed) == (1, 1)
    get = ctx.metrics.registry.get_sample_value
    assert get("dtq_stale_finish_total", {"queue": "fa"}) == 1
    assert get("dtq_tasks_total", {"queue": "fa", "task": "t", "status": "stale"}) == 1
    assert await _status(client, stale) is TaskStatus.RUNNING
    assert finisher.batches.pending == {}


async def test_flush_all_sends_what_waits_and_returns(client: Client, ctx: WorkerContext) -> None:
    scripts = ctx.scripts
    assert isinstance(scripts, GatedScripts)
    scripts.gate.set()
    finisher = Finisher(ctx, TaskLog(enabled=False, json=True))
    executions = await _claim(client, ctx, "fb", 4)
    loop = asyncio.create_task(finisher.run())
    try:
        for ex in executions:
            finisher.add("fb", Finish(ex.held, "ok"), ex)
        await asyncio.wait_for(finisher.flush_all(), 10)
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
    assert finisher.processed == 4
    assert finisher.batches.waiting() == 0


async def _status(client: Client, ex: Execution) -> TaskStatus | None:
    record = await client.get(make_task_id(ex.queue, ex.claimed.rand))
    return record.status if record else None
