"""reclaim: attempts whose worker stopped heartbeating, and deliveries never received
(lua/reclaim.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

import pytest

from dtq_devtools.testing import wait_until
from dtq_devtools.testing.transitions import (
    Harness,
    idle_at_least,
)


async def test_reclaim_after_the_visibility_timeout(h: Harness) -> None:
    rand = await h.new(max_attempts=5)
    (c,) = await h.claim(consumer="w1")
    assert (await h.reclaim(min_idle_ms=60_000)).requeued == 0
    await wait_until(lambda: idle_at_least(h, c, 50), timeout=5, message="idle 50 ms")
    res = await h.reclaim(min_idle_ms=50)
    assert (res.requeued, res.buried, res.lost) == (1, 0, 0)
    assert res.cursors == ["0-0"] * 10
    t = await h.task(rand)
    assert t["st"] == "queued"
    assert t["att"] == "1"  # counted at claim, kept
    assert int(t["lease"]) > int(c.lease)
    (e,) = await h.errors(rand)
    assert (e.attempt, e.reason, e.worker, e.type) == (1, "lease_expired", "w1", "LeaseExpired")
    assert any(
        ev.type == "task.requeued" and ev.reason == "lease_expired" for ev in await h.events()
    )
    (c2,) = await h.claim(consumer="w2")
    assert (c2.rand, c2.attempt) == (rand, 2)
    await h.ok(c2)


@pytest.mark.parametrize(("dlq", "final"), [(True, "dead"), (False, "failed")])
async def test_reclaim_spends_the_attempt_budget(h: Harness, dlq: bool, final: str) -> None:
    """F4/A7: a task that kills every worker that claims it ends in the DLQ after its budget."""
    rand = await h.new(max_attempts=2)
    for attempt in (1, 2):
        (c,) = await h.claim(consumer=f"w{attempt}")
        assert c.attempt == attempt
        res = await h.reclaim(min_idle_ms=0, dlq_enabled=dlq)
        assert (res.requeued, res.buried) == ((1, 0) if attempt == 1 else (0, 1))
    assert await h.status(rand) == final
    errors = await h.errors(rand)
    assert [(e.attempt, e.reason) for e in errors] == [(1, "lease_expired"), (2, "lease_expired")]
    assert await h.all_pending() == []
    assert await h.r.xlen(h.qk.streams[5]) == 0
    assert await h.claim() == []
    assert await h.r.xlen(h.qk.dlq) == (1 if dlq else 0)
    assert f"task.{final}" in await h.event_types(rand)


async def test_reclaim_follows_cursors_within_its_budget(h: Harness) -> None:
    await h.submit(*(h.req() for _ in range(5)))
    claimed = await h.claim()
    first = await h.reclaim(min_idle_ms=0, budget=2)
    assert first.requeued == 2
    assert first.cursors[5] != "0-0"  # more to scan: the caller passes the cursor back
    second = await h.reclaim(min_idle_ms=0, budget=2, cursors=first.cursors)
    assert second.requeued == 2
    assert second.cursors[5] != "0-0"
    third = await h.reclaim(min_idle_ms=0, budget=2, cursors=second.cursors)
    assert third.requeued == 1
    assert third.cursors == ["0-0"] * 10
    for c in claimed:
        assert await h.status(c.rand) == "queued"
    again = await h.claim()
    assert sorted(c.rand for c in again) == sorted(c.rand for c in claimed)
    assert {c.attempt for c in again} == {2}
    await h.ok(*again)


async def test_reclaim_scans_a_bounded_part_of_a_pel_that_is_not_idle_yet(h: Harness) -> None:
    """G4: a worker that died a moment ago holding thousands of entries. Before they are idle,
    one call scans at most 10 x its budget of them and hands the cursor back; it never walks
    the whole PEL in one call (a stall of every client while it runs)."""
    n = 3_000
    for start in range(0, n, 500):
        await h.submit(*(h.req() for _ in range(min(500, n - start))))
    held = 0
    while held < n:
        held += len(await h.claim(consumer="dead", count=500))
    calls, cursors = 0, ["0-0"] * 10
    while True:
        res = await h.reclaim(min_idle_ms=60_000, budget=100, cursors=cursors)
        assert (res.requeued, res.buried) == (0, 0)
        calls, cursors = calls + 1, res.cursors
        if cursors == ["0-0"] * 10:
            break
        assert calls < 100, "the cursor never came back to 0-0"
    # 3,000 entries, at most 1,000 scanned per call: three calls at least.
    assert calls >= 3
    assert len(await h.pending(5)) == n
    # Once idle, everything is taken back within the entry budget, call after call.
    requeued, cursors = 0, ["0-0"] * 10
    while requeued < n:
        res = await h.reclaim(min_idle_ms=0, budget=100, cursors=cursors)
        assert 0 < res.requeued <= 100
        requeued, cursors = requeued + res.requeued, res.cursors
    assert await h.all_pending() == []


async def test_reclaim_reports_entries_trimmed_while_pending(h: Harness) -> None:
    """F1: an operator's XTRIM MAXLEN drops pending entries; reclaim reports them as lost."""
    h.check_invariants = False  # the trim itself breaks the invariants on purpose
    await h.submit(h.req(), h.req(), h.req())
    assert len(await h.claim()) == 3
    await h.r.xtrim(h.qk.streams[5], maxlen=0)
    res = await h.reclaim(min_idle_ms=0)
    assert (res.requeued, res.lost) == (0, 3)
    assert await h.all_pending() == []


async def test_reclaim_acks_entries_of_finished_or_missing_tasks(h: Harness) -> None:
    a = await h.new()
    b = await h.new()
    ca, cb = await h.claim()
    await h.r.delete(h.qk.task(a))
    await h.r.hset(h.qk.task(b), "st", "cancelled")  # ended without its entry being acked
    res = await h.reclaim(min_idle_ms=0)
    assert (res.requeued, res.buried, res.lost) == (0, 0, 0)
    assert await h.all_pending() == []
    assert await h.r.xlen(h.qk.streams[5]) == 0
    assert (ca.rand, cb.rand) == (a, b)


async def test_reclaim_puts_back_a_delivery_its_worker_never_received(h: Harness) -> None:
    """A worker's blocking wake-up read delivered an entry, and the reply was lost with the
    connection: the entry sits in that consumer's PEL while the task still says `queued`.
    The reaper puts it back as it was (no attempt spent), instead of dropping it."""
    rand = await h.new()
    delivered = await h.r.xreadgroup("workers", "w-lost", {h.qk.streams[5]: ">"}, count=1)
    assert delivered[0][1][0][1]["t"] == rand
    res = await h.reclaim(min_idle_ms=0)
    assert (res.requeued, res.buried, res.lost) == (1, 0, 0)
    t = await h.task(rand)
    assert t["st"] == "queued"
    assert "err" not in t  # nothing failed
    (c,) = await h.claim("w2")
    assert (c.rand, c.attempt) == (rand, 1)


async def test_reclaim_says_how_many_entries_were_pending(h: Harness) -> None:
    """An idle queue's call finds nothing pending (the reclaimer then leaves the queue alone
    for a visibility timeout); held entries are counted, and a pass that goes on from a
    cursor counts as pending, so a queue is never left half scanned."""
    assert (await h.reclaim(min_idle_ms=0)).pending == 0  # groups not even made yet
    await h.submit(*(h.req() for _ in range(3)))
    assert (await h.reclaim(min_idle_ms=0)).pending == 0  # queued, delivered to nobody
    claimed = await h.claim()
    res = await h.reclaim(min_idle_ms=60_000)
    assert (res.pending, res.requeued, res.cursors) == (3, 0, ["0-0"] * 10)
    first = await h.reclaim(min_idle_ms=0, budget=2)
    assert (first.pending, first.requeued) == (3, 2)
    second = await h.reclaim(min_idle_ms=0, budget=2, cursors=first.cursors)
    assert second.pending >= 1
    assert second.requeued == 1
    assert (await h.reclaim(min_idle_ms=0)).pending == 0  # everything went back
    again = await h.claim()
    assert sorted(c.rand for c in again) == sorted(c.rand for c in claimed)
    await h.ok(*again)
