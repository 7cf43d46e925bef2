"""submit: admission of a batch, idempotency and admission control (lua/submit.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

import asyncio

from dtq_core.messages import (
    expand_events,
)
from dtq_devtools.testing.transitions import (
    Harness,
)


async def test_submit_queued_and_scheduled(h: Harness) -> None:
    before = await h.now_ms()
    out = await h.submit(h.req(priority=3, args=[1]), h.req(delay_s=100, kwargs={"a": 1}))
    after = await h.now_ms()
    (o1, r1, s1), (o2, r2, s2) = out
    assert (o1, s1, o2, s2) == ("new", "queued", "new", "scheduled")

    t1 = await h.task(r1)
    assert t1["st"] == "queued"
    assert t1["pri"] == "3"
    assert "att" not in t1  # zero counters and open defaults are not stored
    assert t1["args"] == "[1]"
    assert await h.entry_ids(3) == [t1["eid"]]
    assert 0 < await h.r.pttl(h.qk.task(r1)) <= h.ret_ms

    t2 = await h.task(r2)
    assert t2["st"] == "scheduled"
    assert "eid" not in t2
    score = await h.r.zscore(h.qk.delayed, r2)
    assert score is not None
    assert before + 100_000 <= score <= after + 100_001  # rounded up to the ms
    assert [await h.r.xlen(s) for s in h.qk.streams] == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]

    assert await h.event_types(r1) == ["task.queued"]
    assert await h.event_types(r2) == ["task.scheduled"]
    # Every priority stream has its consumer group from the first submit on.
    for pri in range(10):
        assert (await h.group(pri))["name"] == "workers"


async def test_submit_batch_is_one_event_entry_per_type(h: Harness) -> None:
    out = await h.submit(*(h.req(priority=p) for p in (1, 2, 3)))
    assert [o for o, _, _ in out] == ["new"] * 3
    entries = await h.r.xrange(h.qk.events)
    assert len(entries) == 1
    events = expand_events(h.qk.queue, entries[0][0], entries[0][1])
    assert [e.task_id for e in events] == [f"q:{rand}" for _, rand, _ in out]
    assert [e.cursor for e in events] == [f"{entries[0][0]}/{i}" for i in range(3)]


async def test_submit_idempotent_duplicate_and_conflict(h: Harness) -> None:
    ((o, rand, st),) = await h.submit(h.req(args=[1], idempotency_key="order-1"))
    assert (o, st) == ("new", "queued")
    idem_keys = [k async for k in h.r.scan_iter(match=f"{h.qk.idem_prefix}*")]
    assert len(idem_keys) == 1
    assert "order-1" not in idem_keys[0]
    assert 0 < await h.r.pttl(idem_keys[0]) <= 60_000

    before = await h.snapshot()
    assert await h.submit(h.req(args=[1], idempotency_key="order-1")) == [("dup", rand, "queued")]
    assert await h.submit(h.req(args=[2], idempotency_key="order-1")) == [("conflict", rand, "")]
    assert await h.snapshot() == before  # replays and conflicts write nothing

    # The replay reports the original task's current status.
    (c,) = await h.claim()
    assert await h.submit(h.req(args=[1], idempotency_key="order-1")) == [("dup", rand, "running")]
    await h.ok(c)


async def test_submit_same_key_twice_in_one_batch(h: Harness) -> None:
    out = await h.submit(
        h.req(args=[1], idempotency_key="k"),
        h.req(args=[1], idempotency_key="k"),
        h.req(args=[9], idempotency_key="k"),
    )
    assert [o for o, _, _ in out] == ["new", "dup", "conflict"]
    assert out[0][1] == out[1][1] == out[2][1]
    assert await h.r.xlen(h.qk.streams[5]) == 1


async def test_concurrent_submits_with_one_key_make_one_task(h: Harness) -> None:
    """F23: the key is checked and set inside the submit script, so racing requests cannot
    create two tasks."""
    replies = await asyncio.gather(
        *(h.submit(h.req(args=[1], idempotency_key="race")) for _ in range(20))
    )
    outcomes = [r[0] for r in replies]
    assert sorted(o for o, _, _ in outcomes) == ["dup"] * 19 + ["new"]
    assert len({rand for _, rand, _ in outcomes}) == 1
    assert await h.r.xlen(h.qk.streams[5]) == 1


async def test_submit_admission_counts_delayed_tasks(h: Harness) -> None:
    out = await h.submit(h.req(delay_s=100), h.req(delay_s=100), h.req(), max_depth=3)
    assert [o for o, _, _ in out] == ["new"] * 3

    before = await h.snapshot()
    ((o, rand, st),) = await h.submit(h.req(), max_depth=3)
    assert (o, st) == ("full", "")
    out = await h.submit(h.req(delay_s=5), h.req(idempotency_key="k"), max_depth=3)
    assert [(o, s) for o, _, s in out] == [("full", ""), ("full", "")]
    assert await h.snapshot() == before  # nothing written for refused items
    assert not await h.r.exists(h.qk.task(rand))

    # A batch across the limit: the first items fit, the rest are refused.
    out = await h.submit(h.req(), h.req(), h.req(), max_depth=5)
    assert [o for o, _, _ in out] == ["new", "new", "full"]
    assert not await h.r.exists(h.qk.task(out[2][1]))

    # Running tasks are not waiting: claiming makes room.
    first = await h.claim(count=3)
    assert len(first) == 3
    out = await h.submit(h.req(), h.req(), max_depth=5)
    assert [o for o, _, _ in out] == ["new", "new"]
    await h.ok(*first, *await h.claim())


async def test_admission_after_processing_counts_only_waiting(h: Harness) -> None:
    for _ in range(3):
        out = await h.submit(*(h.req() for _ in range(150)), max_depth=150)
        assert {o for o, _, _ in out} == {"new"}
        claimed = await h.claim(count=150)
        assert len(claimed) == 150
        assert set(await h.ok(*claimed)) == {"succeeded"}
    # Streams were trimmed and acked: the depth is 0 again, not the stream length.
    out = await h.submit(*(h.req() for _ in range(150)), max_depth=150)
    assert {o for o, _, _ in out} == {"new"}
    await h.ok(*await h.claim(count=150))
