"""purge: waiting tasks cancelled in bounded steps (lua/purge.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from dtq_devtools.testing.transitions import (
    Harness,
)


async def test_purge_cancels_waiting_tasks_and_leaves_running_ones(h: Harness) -> None:
    running = await h.new(priority=9)
    (c,) = await h.claim()
    queued = [await h.new(priority=p) for p in (0, 4, 8)]
    scheduled = [await h.new(delay_s=100), await h.new(delay_s=200)]
    n = await h.scripts.purge(h.qk, limit=100, events_maxlen=h.ev, retention_ms=h.ret_ms)
    assert n == (5, 5)  # (entries read, tasks cancelled)
    for rand in queued + scheduled:
        assert await h.status(rand) == "cancelled"
    assert await h.status(running) == "running"
    assert await h.r.zcard(h.qk.delayed) == 0
    assert all([(await h.group(p))["lag"] == 0 for p in range(10)])
    assert await h.claim() == []
    assert any(e.type == "task.cancelled" and e.reason == "purged" for e in await h.events())
    again = await h.scripts.purge(h.qk, limit=100, events_maxlen=h.ev, retention_ms=h.ret_ms)
    assert again == (0, 0)
    await h.ok(c)


async def test_purge_respects_its_limit(h: Harness) -> None:
    await h.submit(*(h.req() for _ in range(3)), h.req(delay_s=100), h.req(delay_s=100))
    counts = [
        await h.scripts.purge(h.qk, limit=2, events_maxlen=h.ev, retention_ms=h.ret_ms)
        for _ in range(4)
    ]
    assert counts == [(2, 2), (2, 2), (1, 1), (0, 0)]


async def test_purge_reads_but_does_not_count_tasks_cancelled_before(h: Harness) -> None:
    cancelled = await h.new()
    waiting = await h.new()
    assert await h.cancel(cancelled) == ("cancelled", "cancelled")
    n = await h.scripts.purge(h.qk, limit=100, events_maxlen=h.ev, retention_ms=h.ret_ms)
    assert n == (2, 1)
    assert await h.status(waiting) == "cancelled"
    assert (await h.group(5))["lag"] == 0
