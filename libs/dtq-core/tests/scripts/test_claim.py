"""claim: strict priority, batches, defaults, skipped and expired entries, adoption of the wake-up
read (lua/claim.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

import msgspec
import pytest

from dtq_core.protocol.scripts import task_defaults
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.transitions import (
    Harness,
    later_than,
)


async def test_claim_strict_priority_one_at_a_time(h: Harness) -> None:
    order = [0, 5, 9, 3, 9, 1, 7, 2, 8, 4, 6, 5]
    out = await h.submit(*(h.req(priority=p, args=[i]) for i, p in enumerate(order)))
    rand_pri = {rand: order[i] for i, (_, rand, _) in enumerate(out)}
    got = []
    for _ in order:
        (c,) = await h.claim(count=1)
        got.append(c)
    assert [c.priority for c in got] == sorted(order, reverse=True)
    assert all(rand_pri[c.rand] == c.priority for c in got)
    # FIFO within a priority.
    fives = [c for c in got if c.priority == 5]
    assert [msgspec.json.decode(c.args) for c in fives] == [[1], [11]]
    assert await h.claim(count=1) == []
    await h.ok(*got)


async def test_claim_strict_priority_in_one_batch(h: Harness) -> None:
    await h.submit(*(h.req(priority=p) for p in (0, 3, 9, 1, 9, 8, 2)))
    got = await h.claim(count=100)
    assert [c.priority for c in got] == [9, 9, 8, 3, 2, 1, 0]
    await h.ok(*got)


async def test_claim_newer_high_priority_beats_older_low_priority(h: Harness) -> None:
    await h.submit(h.req(priority=5), h.req(priority=5))
    (first,) = await h.claim(count=1)
    await h.submit(h.req(priority=9))
    (second,) = await h.claim(count=1)
    assert (first.priority, second.priority) == (5, 9)
    (third,) = await h.claim(count=1)
    assert third.priority == 5
    await h.ok(first, second, third)


async def test_claim_batch_count(h: Harness) -> None:
    out = await h.submit(*(h.req(args=[i]) for i in range(10)))
    a = await h.claim(count=4)
    b = await h.claim(count=10, consumer="w2")
    assert (len(a), len(b)) == (4, 6)
    assert await h.claim(count=10) == []
    assert [c.rand for c in a + b] == [rand for _, rand, _ in out]
    for c in a:
        t = await h.task(c.rand)
        assert (t["st"], t["att"], t["lease"], t["w"]) == ("running", "1", "1", "w1")
        assert (c.attempt, c.lease) == (1, "1")
        assert "sa" in t
    assert {p["consumer"] for p in await h.pending(5)} == {"w1", "w2"}
    started = [e for e in await h.events() if e.type == "task.started"]
    assert [e.attempt for e in started] == [1] * 10
    assert {e.worker for e in started} == {"w1", "w2"}
    await h.ok(*a, *b)


async def test_claim_resolves_defaults_left_open_at_submit(h: Harness) -> None:
    rand = await h.new()
    t = await h.task(rand)
    assert "max" not in t
    assert "to" not in t
    (c,) = await h.claim()
    assert (c.max_attempts, c.timeout_ms) == (h.s.retries.max_attempts, h.s.tasks.timeout_ms)
    t = await h.task(rand)
    assert (t["max"], t["to"]) == (str(h.s.retries.max_attempts), str(h.s.tasks.timeout_ms))
    explicit = await h.new(max_attempts=3, timeout_s=2)
    (c2,) = await h.claim()
    assert c2.rand == explicit
    assert (c2.max_attempts, c2.timeout_ms) == (3, 2000)
    await h.ok(c, c2)


async def test_claim_skips_cancelled_and_duplicate_entries(h: Harness) -> None:
    (_, a, _), (_, b, _), (_, c, _) = await h.submit(h.req(), h.req(), h.req())
    assert await h.cancel(b) == ("cancelled", "cancelled")
    # A duplicate entry of task a (e.g. a re-sent XADD): it must never be a second execution.
    dup = await h.r.xadd(h.qk.streams[5], {"t": a})
    got = await h.claim()
    assert [x.rand for x in got] == [a, c]
    # Skipped entries are acked and deleted, never left pending.
    assert {p["message_id"] for p in await h.pending(5)} == {x.entry_id for x in got}
    assert dup not in await h.entry_ids(5)
    assert await h.claim() == []
    await h.ok(*got)
    assert await h.all_pending() == []
    assert await h.status(b) == "cancelled"


async def test_claim_expired_ttl(h: Harness) -> None:
    rand = await h.new(ttl_s=0.05)
    exp_ms = int((await h.task(rand))["exp"]) // 1000
    await wait_until(lambda: later_than(h, exp_ms), timeout=5, message="ttl passed")
    assert await h.claim() == []
    t = await h.task(rand)
    assert t["st"] == "expired"
    assert "ft" in t
    assert await h.all_pending() == []
    assert await h.r.xlen(h.qk.streams[5]) == 0
    assert await h.event_types(rand) == ["task.queued", "task.expired"]


async def test_claim_of_an_entry_without_hash_acks_it(h: Harness) -> None:
    rand = await h.new()
    keep = await h.new()
    await h.r.delete(h.qk.task(rand))
    got = await h.claim()
    assert [c.rand for c in got] == [keep]
    assert [p["message_id"] for p in await h.pending(5)] == [got[0].entry_id]
    assert len(await h.entry_ids(5)) == 1
    await h.ok(*got)


async def test_claim_adopts_entries_of_the_wake_up_read(h: Harness) -> None:
    rand = await h.new(priority=4)
    ((_, entries),) = await h.r.xreadgroup("workers", "w1", {h.qk.streams[4]: ">"}, count=1)
    ((eid, fields),) = entries
    assert fields == {"t": rand}
    (c,) = await h.claim(count=1, adopt=((4, eid, rand),))
    assert (c.rand, c.entry_id, c.attempt) == (rand, eid, 1)
    await h.ok(c)


async def test_a_retried_claim_reports_what_its_lost_reply_started(h: Harness) -> None:
    """The claim that adopted a wake-up delivery ran, but its reply was lost with the
    connection; the worker sends the same claim again. It gets the same attempt back (same
    lease, no second start), and the entry stays pending: never acked under a live attempt."""
    rand = await h.new()
    ((_, entries),) = await h.r.xreadgroup("workers", "w1", {h.qk.streams[5]: ">"}, count=1)
    eid = entries[0][0]
    (first,) = await h.claim("w1", count=4, adopt=((5, eid, rand),))
    (again,) = await h.claim("w1", count=4, adopt=((5, eid, rand),))
    assert (again.rand, again.entry_id, again.lease, again.attempt) == (
        first.rand,
        first.entry_id,
        first.lease,
        first.attempt,
    )
    assert [p["message_id"] for p in await h.all_pending()] == [eid]
    assert await h.event_types(rand) == ["task.queued", "task.started"]
    # Another worker retrying a claim with that entry leaves it alone.
    assert await h.claim("w2", count=4, adopt=((5, eid, rand),)) == []
    assert [p["message_id"] for p in await h.all_pending()] == [eid]
    # And a hand-back of it (count 0) leaves it to its lease too.
    await h.claim("w1", count=0, adopt=((5, eid, rand),))
    assert [p["message_id"] for p in await h.all_pending()] == [eid]
    assert await h.ok(first) == ["succeeded"]


async def test_paused_queue_hands_adopted_entries_back(h: Harness) -> None:
    rand = await h.new()
    await h.r.hset(h.qk.meta, "paused", "1")
    ((_, ((eid, _),)),) = await h.r.xreadgroup("workers", "w1", {h.qk.streams[5]: ">"}, count=1)
    paused, got = await h.scripts.claim(
        h.qk,
        consumer="w1",
        count=10,
        events_maxlen=h.ev,
        retention_ms=h.ret_ms,
        defaults=task_defaults(10, 1000),
        adopt=((5, eid, rand),),
    )
    assert (paused, got) == (True, [])
    assert await h.all_pending() == []
    t = await h.task(rand)
    assert t["st"] == "queued"
    assert t.get("att", "0") == "0"
    assert t["eid"] != eid  # a fresh undelivered entry
    await h.r.hset(h.qk.meta, "paused", "0")
    (c,) = await h.claim()
    assert c.rand == rand
    await h.ok(c)


async def test_claim_count_zero_hands_adopted_entries_back(h: Harness) -> None:
    rand = await h.new()
    ((_, ((eid, _),)),) = await h.r.xreadgroup("workers", "w1", {h.qk.streams[5]: ">"}, count=1)
    assert await h.claim(count=0, adopt=((5, eid, rand),)) == []
    assert await h.all_pending() == []
    assert await h.status(rand) == "queued"


@pytest.mark.parametrize("where", ["promote", "claim"])
async def test_a_task_whose_record_expired_is_reported_expired(h: Harness, where: str) -> None:
    rand = await h.new(delay_s=0.05) if where == "promote" else await h.new()
    await h.r.pexpire(h.qk.task(rand), 1)  # its record outlived by its place in the queue
    await wait_until(lambda: _gone(h, rand), timeout=5, message="record expired")
    due_ms = int(await h.r.zscore(h.qk.delayed, rand) or 0)
    await wait_until(lambda: later_than(h, due_ms), timeout=5, message="due")
    if where == "promote":
        await h.promote()
    else:
        assert await h.claim() == []
    assert await h.event_types(rand) == [
        "task.queued" if where == "claim" else "task.scheduled",
        "task.expired",
    ]


async def _gone(h: Harness, rand: str) -> bool:
    return not await h.r.exists(h.qk.task(rand))
