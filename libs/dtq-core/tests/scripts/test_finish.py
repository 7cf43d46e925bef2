"""finish: outcomes of a batch fenced by their leases, replays, and the bounded work streams
(lua/finish.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

import msgspec
import pytest

from dtq_core.protocol.scripts import Finish, Held
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.transitions import (
    Harness,
    err,
    held,
    later_than,
)


async def test_finish_ok(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "ok", '{"a":1}', "1")) == ["succeeded"]
    t = await h.task(rand)
    assert (t["st"], t["res"], t["rtr"]) == ("succeeded", '{"a":1}', "1")
    assert "ft" in t
    assert 0 < await h.r.pttl(h.qk.task(rand)) <= h.result_ms
    assert await h.all_pending() == []
    assert await h.event_types(rand) == ["task.queued", "task.started", "task.succeeded"]


async def test_finish_retry_then_promote_runs_the_next_attempt(h: Harness) -> None:
    rand = await h.new(max_attempts=3)
    (c,) = await h.claim()
    before = await h.now_ms()
    assert await h.finish(Finish(held(c), "retry", err(1), "300")) == ["retrying"]
    after = await h.now_ms()
    assert await h.status(rand) == "retrying"
    score = await h.r.zscore(h.qk.delayed, rand)
    assert score is not None
    assert before + 300 <= score <= after + 301  # rounded up to the ms
    assert [e.message for e in await h.errors(rand)] == ["boom"]
    assert await h.all_pending() == []
    promoted, next_due = await h.promote()
    if promoted == 0:  # not due yet: the next due time is reported
        assert next_due == int(score)
        await wait_until(lambda: later_than(h, int(score)), timeout=5, message="retry due")
        assert (await h.promote())[0] == 1
    (c2,) = await h.claim()
    assert (c2.rand, c2.attempt) == (rand, 2)
    assert int(c2.lease) > int(c.lease)
    await h.ok(c2)
    assert len(await h.errors(rand)) == 1  # the history stays


async def test_finish_dead_goes_to_the_dlq(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "dead", err(1, "fatal"), "")) == ["dead"]
    t = await h.task(rand)
    assert t["st"] == "dead"
    ((dlq_id, fields),) = await h.r.xrange(h.qk.dlq)
    assert t["dlq"] == dlq_id
    assert fields["t"] == rand
    assert fields["task"] == "t.x"
    assert msgspec.json.decode(fields["err"])["message"] == "fatal"
    assert 0 < await h.r.pttl(h.qk.task(rand)) <= h.ret_ms
    assert await h.all_pending() == []
    assert "task.dead" in await h.event_types(rand)


async def test_finish_dead_without_dlq_is_failed(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "dead", err(), ""), dlq_enabled=False) == ["failed"]
    assert await h.status(rand) == "failed"
    assert await h.r.xlen(h.qk.dlq) == 0
    assert "task.failed" in await h.event_types(rand)


async def test_finish_cancel(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "cancel")) == ["cancelled"]
    assert await h.status(rand) == "cancelled"
    assert await h.all_pending() == []


async def test_finish_a_mixed_batch(h: Harness) -> None:
    await h.submit(*(h.req(priority=p) for p in (9, 7, 5, 3)))
    a, b, c, d = await h.claim()
    res = await h.finish(
        Finish(held(a), "ok", "1", ""),
        Finish(held(b), "retry", err(), "1000"),
        Finish(held(c), "dead", err(), ""),
        Finish(held(d), "cancel"),
    )
    assert res == ["succeeded", "retrying", "dead", "cancelled"]
    assert await h.all_pending() == []


async def test_stale_finish_changes_nothing(h: Harness) -> None:
    """F5: the worker whose attempt was reclaimed cannot ack or overwrite the newer attempt."""
    rand = await h.new()
    (old,) = await h.claim(consumer="w1")
    assert (await h.reclaim(min_idle_ms=0)).requeued == 1
    (new,) = await h.claim(consumer="w2")
    assert new.rand == rand
    assert new.lease != old.lease

    before = await h.snapshot()
    for outcome in ("ok", "retry", "dead", "cancel"):
        extra = "10" if outcome == "retry" else ""
        assert await h.finish(Finish(held(old), outcome, err(), extra)) == ["stale"]
    # Right lease, wrong entry; and an entry id of the old attempt with the new lease.
    wrong_eid = Held(rand, new.priority, old.entry_id, new.lease)
    assert await h.finish(Finish(wrong_eid, "ok", "1", "")) == ["stale"]
    assert await h.snapshot() == before
    assert [(p["message_id"], p["consumer"]) for p in await h.pending(5)] == [(new.entry_id, "w2")]
    assert await h.ok(new) == ["succeeded"]
    after = await h.snapshot()
    # The same finish again (its reply was lost) is a replay: it changes nothing.
    assert await h.ok(new, result='"other"') == ["succeeded"]
    assert await h.snapshot() == after


@pytest.mark.parametrize(
    ("outcome", "extra", "status", "dlq_enabled"),
    [
        ("ok", "", "succeeded", True),
        ("retry", "60000", "retrying", True),
        ("dead", "", "dead", True),
        ("dead", "", "failed", False),
        ("cancel", "", "cancelled", True),
    ],
)
async def test_a_finish_sent_again_gets_its_own_status_and_changes_nothing(
    h: Harness, outcome: str, extra: str, status: str, dlq_enabled: bool
) -> None:
    """A2: a finish whose reply was lost is sent again by the worker; the attempt's outcome
    is already recorded, so the replay answers the status it set (never ``stale`` for the
    worker's own success), writes no second terminal event and acks nothing twice."""
    rand = await h.new()
    (c,) = await h.claim()
    payload = err() if outcome in {"retry", "dead"} else '"r"'
    finish = Finish(held(c), outcome, payload, extra)
    assert await h.finish(finish, dlq_enabled=dlq_enabled) == [status]
    before = await h.snapshot()
    assert await h.finish(finish, dlq_enabled=dlq_enabled) == [status]
    assert await h.snapshot() == before
    assert (await h.event_types(rand)).count(f"task.{status}") == 1


async def test_a_replayed_retry_keeps_its_status_after_the_next_attempt_began(
    h: Harness,
) -> None:
    """The retried attempt's outcome stays its own after the task moved on; the newer
    attempt's lease still fences it off from anything else."""
    rand = await h.new(max_attempts=3)
    (c,) = await h.claim()
    retry = Finish(held(c), "retry", err(1), "0")
    assert await h.finish(retry) == ["retrying"]
    await wait_until(lambda: _promoted(h), timeout=5, message="retry promoted")
    (c2,) = await h.claim(consumer="w2")
    assert (c2.rand, c2.attempt) == (rand, 2)
    before = await h.snapshot()
    assert await h.finish(retry) == ["retrying"]
    assert await h.snapshot() == before
    assert await h.ok(c2) == ["succeeded"]


async def _promoted(h: Harness) -> bool:
    return (await h.promote())[0] == 1


async def test_a_finish_after_the_reaper_buried_the_attempt_is_stale(h: Harness) -> None:
    """Only the attempt's own recorded finish is a replay: a task buried by the reaper with
    the same lease (attempts exhausted) refuses the late finish as stale."""
    rand = await h.new(max_attempts=1)
    (c,) = await h.claim()
    assert (await h.reclaim(min_idle_ms=0)).buried == 1
    assert await h.status(rand) == "dead"
    before = await h.snapshot()
    assert await h.ok(c) == ["stale"]
    assert await h.snapshot() == before


async def test_finish_of_a_waiting_task_is_stale(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    await h.scripts.release(h.qk, [held(c)], events_maxlen=h.ev, reason="drain")
    before = await h.snapshot()
    assert await h.ok(c) == ["stale"]
    assert await h.snapshot() == before
    assert await h.status(rand) == "queued"


async def test_finishing_keeps_work_streams_bounded(h: Harness) -> None:
    await h.submit(*(h.req(priority=6) for _ in range(500)))
    await h.submit(*(h.req(priority=6) for _ in range(500)))
    done = 0
    while batch := await h.claim(count=100):
        assert set(await h.ok(*batch)) == {"succeeded"}
        done += len(batch)
    assert done == 1000
    assert await h.r.xlen(h.qk.streams[6]) < 150
    assert await h.pending(6) == []


async def test_trimming_never_drops_undelivered_entries(h: Harness) -> None:
    out = await h.submit(*(h.req() for _ in range(400)))
    rands = [rand for _, rand, _ in out]
    done = []
    for _ in range(3):
        batch = await h.claim(count=100)
        await h.ok(*batch)
        done += [c.rand for c in batch]
    # 100 entries were never delivered: all of them survive the trims and are claimable.
    rest = await h.claim(count=1000)
    assert [c.rand for c in rest] == rands[300:]
    assert done == rands[:300]
    await h.ok(*rest)


async def test_trimming_keeps_the_oldest_pending_entry(h: Harness) -> None:
    await h.submit(*(h.req() for _ in range(300)))
    (slow,) = await h.claim(count=1, consumer="slow")
    while batch := await h.claim(count=100):
        await h.ok(*batch)
    # Entries at and above the oldest pending one stay; it can still be finished.
    assert slow.entry_id in await h.entry_ids(5)
    assert await h.ok(slow) == ["succeeded"]
    # The next finish may trim everything below the group's position.
    await h.submit(h.req())
    await h.ok(*await h.claim())
    assert await h.r.xlen(h.qk.streams[5]) < 150
