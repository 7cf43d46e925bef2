"""reconcile: tasks whose stream entry was deleted are repaired (lua/reconcile.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from dtq_core.client import Client
from dtq_core.ops.recovery import reconcile_queue
from dtq_devtools.testing.transitions import (
    Harness,
    bury_dead,
)


async def test_tasks_of_trimmed_entries_are_repaired_by_reconcile(h: Harness) -> None:
    """F1/B9: entries deleted under running and queued tasks; reconcile puts them back."""
    out = await h.submit(h.req(), h.req(), h.req(max_attempts=1), h.req())
    assert len(await h.claim(count=3)) == 3
    await h.r.xtrim(h.qk.streams[5], maxlen=0)
    assert (await h.reclaim(min_idle_ms=0)).lost == 3
    result = await reconcile_queue(Client(h.r, h.s), h.qk.queue)
    assert (result.checked, result.restored, result.requeued, result.buried) == (4, 1, 2, 1)
    statuses = [await h.status(rand) for _, rand, _ in out]
    assert statuses == ["queued", "queued", "dead", "queued"]
    assert len(await h.claim(count=10)) == 3
    again = await reconcile_queue(Client(h.r, h.s), h.qk.queue)
    assert (again.restored, again.requeued, again.buried) == (0, 0, 0)


async def test_reconcile_trims_the_dlq_with_its_records(h: Harness) -> None:
    """A task buried by reconcile (its entry lost, its budget spent) trims the DLQ too."""
    (old,) = await bury_dead(h, 1, maxlen=10)
    out = await h.submit(h.req(max_attempts=1))
    (c,) = await h.claim()
    await h.r.xtrim(h.qk.streams[c.priority], maxlen=0)
    assert (await h.reclaim(min_idle_ms=0)).lost == 1
    rand = out[0][1]
    reply = await h.scripts.reconcile(
        h.qk, [rand], events_maxlen=h.ev, retention_ms=h.ret_ms, dlq_enabled=True, dlq_maxlen=1
    )
    assert reply == (0, 0, 1)
    assert (await h.status(old), await h.status(rand)) == (None, "dead")
    assert [f["t"] for _, f in await h.r.xrange(h.qk.dlq)] == [rand]
    assert "task.discarded" in await h.event_types(old)
