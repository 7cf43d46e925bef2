"""extend_lease: the heartbeat of held attempts, fenced by the lease (lua/extend_lease.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from dtq_core.protocol.scripts import Finish
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.transitions import (
    Harness,
    held,
    idle_at_least,
    idle_ms,
)


async def test_extend_lease_resets_the_idle_time(h: Harness) -> None:
    await h.new()
    (c,) = await h.claim()
    await wait_until(lambda: idle_at_least(h, c, 300), timeout=5, message="idle 300 ms")
    assert await h.scripts.extend_lease(h.qk, "w1", [held(c)]) == ([], [])
    assert await idle_ms(h, 5, c.entry_id) < 300
    assert (await h.reclaim(min_idle_ms=300)).requeued == 0
    assert [p["consumer"] for p in await h.pending(5)] == ["w1"]
    await h.ok(c)


async def test_extend_lease_refuses_a_reclaimed_lease_and_steals_nothing(h: Harness) -> None:
    rand = await h.new()
    (old,) = await h.claim(consumer="w1")
    assert (await h.reclaim(min_idle_ms=0)).requeued == 1

    # Reclaimed but not yet claimed again: the entry is undelivered and must stay so.
    assert await h.scripts.extend_lease(h.qk, "w1", [held(old)]) == ([rand], [])
    assert await h.all_pending() == []

    (new,) = await h.claim(consumer="w2")
    lost, cancel = await h.scripts.extend_lease(h.qk, "w1", [held(old)])
    assert (lost, cancel) == ([rand], [])
    assert [(p["message_id"], p["consumer"]) for p in await h.pending(5)] == [(new.entry_id, "w2")]
    # The owner's own extension works.
    assert await h.scripts.extend_lease(h.qk, "w2", [held(new)]) == ([], [])
    await h.ok(new)


async def test_extend_lease_reports_requested_cancellation(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.cancel(rand) == ("requested", "running")
    assert await h.scripts.extend_lease(h.qk, "w1", [held(c)]) == ([], [rand])
    assert await h.finish(Finish(held(c), "cancel")) == ["cancelled"]
