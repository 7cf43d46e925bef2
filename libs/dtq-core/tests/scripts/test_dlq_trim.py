"""The DLQ cap: the trim a burial does (finish, reclaim, reconcile) deletes the records of the
entries it drops (bury and trim_dlq in lua/_lib.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from dtq_core.protocol.scripts import Finish
from dtq_devtools.testing.transitions import (
    Harness,
    bury_dead,
    err,
    held,
)


async def test_the_dlq_trim_deletes_the_records_of_the_entries_it_drops(h: Harness) -> None:
    """G5: the DLQ cap bounds the dead records too; the oldest go with their entries, with
    one task.discarded event (reason dlq_trimmed) per call."""
    rands = await bury_dead(h, 8, maxlen=3)
    assert [f["t"] for _, f in await h.r.xrange(h.qk.dlq)] == rands[-3:]
    assert [await h.status(r) for r in rands] == [None] * 5 + ["dead"] * 3
    trims = [e for e in await h.events() if e.type == "task.discarded"]
    assert [(e.task_id, e.reason) for e in trims] == [
        (f"{h.qk.queue}:{r}", "dlq_trimmed") for r in rands[:5]
    ]
    # What stays can be requeued, discarded and buried again as before.
    assert await h.scripts.requeue(
        h.qk, [rands[-1]], events_maxlen=h.ev, retention_ms=h.ret_ms
    ) == ["requeued"]
    assert await h.scripts.discard(h.qk, [rands[-2]], events_maxlen=h.ev) == 1
    assert await h.r.xlen(h.qk.dlq) == 1
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "dead", err(), ""), dlq_maxlen=3) == ["dead"]
    assert [f["t"] for _, f in await h.r.xrange(h.qk.dlq)] == [rands[-3], rands[-1]]


async def test_the_dlq_trim_keeps_a_record_that_names_a_newer_entry(h: Harness) -> None:
    """A task requeued and dead again has a new DLQ entry: an old copy's trim leaves it."""
    (rand,) = await bury_dead(h, 1, maxlen=10)
    # A second copy of the task (an operator's XADD): the record names its own entry only.
    stray = await h.r.xadd(h.qk.dlq, {"t": rand, "task": "t.x", "err": err()})
    assert await h.scripts.requeue(h.qk, [rand], events_maxlen=h.ev, retention_ms=h.ret_ms) == [
        "requeued"
    ]
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "dead", err(), ""), dlq_maxlen=1) == ["dead"]
    assert await h.status(rand) == "dead"
    ((eid, _),) = await h.r.xrange(h.qk.dlq)
    assert (await h.task(rand))["dlq"] == eid != stray


async def test_a_lowered_dlq_cap_is_reached_in_bounded_steps(h: Harness) -> None:
    """One bury removes at most 100 entries, so a cap lowered by far costs no long call."""
    await bury_dead(h, 130, maxlen=1000)
    await bury_dead(h, 1, maxlen=10)
    assert await h.r.xlen(h.qk.dlq) == 31
    await bury_dead(h, 1, maxlen=10)
    assert await h.r.xlen(h.qk.dlq) == 10
    keys = [k async for k in h.r.scan_iter(match=f"{h.s.namespace}:{{*}}:t:*")]
    assert len(keys) == 10


async def test_reclaim_trims_the_dlq_with_its_records(h: Harness) -> None:
    rands = [await h.new(max_attempts=1) for _ in range(3)]
    await h.claim()
    res = await h.reclaim(min_idle_ms=0, dlq_maxlen=1)
    assert res.buried == 3
    assert [await h.status(r) for r in rands].count("dead") == 1
    assert await h.r.xlen(h.qk.dlq) == 1
