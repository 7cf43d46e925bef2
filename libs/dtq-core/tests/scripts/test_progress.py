"""progress: a running attempt's report, fenced by its lease (lua/progress.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from dtq_devtools.testing.transitions import (
    Harness,
)


async def test_progress_is_fenced_by_the_lease(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    payload = '{"value":0.5,"message":"half"}'
    assert await h.scripts.progress(h.qk, rand, c.lease, payload, events_maxlen=h.ev)
    assert (await h.task(rand))["prog"] == payload
    (ev,) = [e for e in await h.events() if e.type == "task.progress"]
    assert ev.data == {"progress": {"value": 0.5, "message": "half"}}
    assert ev.attempt == 1
    stale = str(int(c.lease) + 1)
    assert not await h.scripts.progress(h.qk, rand, stale, '{"value":0.9}', events_maxlen=h.ev)
    assert (await h.task(rand))["prog"] == payload
    await h.ok(c)
    assert not await h.scripts.progress(h.qk, rand, c.lease, '{"value":1}', events_maxlen=h.ev)
