"""The reclaimer against real Redis: a dead worker's attempts come back after the visibility
timeout, and a queue with nothing pending is looked at once a visibility timeout only."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dtq_core import Client
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings
from dtq_core.protocol.scripts import ReclaimResult
from dtq_devtools.testing import wait_until
from dtq_worker.context import WorkerContext
from dtq_worker.metrics import WorkerMetrics
from dtq_worker.reclaimer import Reclaimer

QUEUES = ["rq-a", "rq-b", "rq-c"]


@pytest.fixture
async def ctx(settings: Settings) -> AsyncIterator[WorkerContext]:
    redis = connect(settings)
    yield WorkerContext.create(
        settings,
        QUEUES,
        consumer="reaper-test",
        redis=redis,
        blocking=redis,
        metrics=WorkerMetrics(),
    )
    await redis.aclose()


def _count_calls(ctx: WorkerContext, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Reclaim calls per queue (the script runs as it is)."""
    calls: Counter[str] = Counter()
    reclaim_many = ctx.scripts.reclaim_many

    async def counted(queues: Any, **kwargs: Any) -> list[ReclaimResult]:
        calls.update(qk.queue for qk, _ in queues)
        return await reclaim_many(queues, **kwargs)

    monkeypatch.setattr(ctx.scripts, "reclaim_many", counted)
    return calls


async def test_an_idle_queue_is_looked_at_once_a_visibility_timeout_and_loses_nothing(
    client: Client, ctx: WorkerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_calls(ctx, monkeypatch)
    reclaimer = Reclaimer(ctx)
    timeout_s = ctx.settings.worker.visibility_timeout_s
    await client.enqueue("t", queue="rq-b")
    assert not await reclaimer.sweep()
    assert calls == Counter(QUEUES)  # nothing pending anywhere
    # Delivered to a worker that dies at once, after the reclaimer found the queue empty.
    _, claimed = await ctx.scripts.claim(
        ctx.by_name["rq-b"], consumer="w-dead", count=1, events_maxlen=100, retention_ms=60_000
    )
    died_at = time.monotonic()
    assert len(claimed) == 1
    await reclaimer.sweep()
    assert calls == Counter(QUEUES)  # nothing can be reclaimable yet: not even asked

    async def reclaimed() -> bool:
        await reclaimer.sweep()
        value = ctx.metrics.registry.get_sample_value(
            "dtq_reclaimed_total", {"queue": "rq-b", "outcome": "requeued"}
        )
        return value == 1

    await wait_until(reclaimed, timeout=4 * timeout_s, interval=0.05, message="reclaimed")
    # About a visibility timeout after it died, as when every pass looked at every queue.
    assert time.monotonic() - died_at < 2 * timeout_s + 1
    assert calls["rq-a"] <= 3  # once a visibility timeout, not every pass (every 50 ms)
