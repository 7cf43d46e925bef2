"""release: attempts handed back at once (lua/release.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from dtq_devtools.testing.transitions import (
    Harness,
    held,
)


async def test_release_hands_back_at_once(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim(consumer="w1")
    assert await h.scripts.release(h.qk, [held(c)], events_maxlen=h.ev, reason="drain") == [rand]
    t = await h.task(rand)
    assert t["st"] == "queued"
    assert t["att"] == "0"  # the attempt did not run to an outcome: given back
    assert int(t["lease"]) == int(c.lease) + 1
    assert t["eid"] != c.entry_id
    assert await h.entry_ids(5) == [t["eid"]]  # the old entry is gone
    assert await h.all_pending() == []
    assert (await h.group(5))["lag"] == 1  # undelivered again
    assert any(e.type == "task.requeued" and e.reason == "drain" for e in await h.events())

    (again,) = await h.claim(consumer="w2")  # no visibility timeout to wait for
    assert (again.rand, again.attempt) == (rand, 1)
    assert await h.ok(c) == ["stale"]
    assert await h.scripts.release(h.qk, [held(c)], events_maxlen=h.ev, reason="x") == []
    await h.ok(again)
