"""promote: due tasks into their streams, fenced by the leader epoch (lua/promote.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

import pytest

from dtq_core.errors import StaleLeaderError
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.transitions import (
    Harness,
    later_than,
)


async def test_promote_moves_due_tasks_within_its_limit(h: Harness) -> None:
    due = [await h.new(delay_s=0.05, priority=p) for p in (1, 2, 3)]
    later = await h.new(delay_s=100)
    due_ms = max([int(await h.r.zscore(h.qk.delayed, r) or 0) for r in due])
    await wait_until(lambda: later_than(h, due_ms), timeout=5, message="tasks due")

    promoted, next_due = await h.promote(limit=2)
    assert promoted == 2
    assert next_due <= await h.now_ms()  # the third one is due already
    promoted, next_due = await h.promote(limit=2)
    assert promoted == 1
    assert next_due == int(await h.r.zscore(h.qk.delayed, later) or 0)
    for rand in due:
        assert await h.status(rand) == "queued"
    assert await h.status(later) == "scheduled"
    got = await h.claim()
    assert [c.priority for c in got] == [3, 2, 1]
    await h.ok(*got)


async def test_promote_refuses_an_older_leader_epoch(h: Harness) -> None:
    assert await h.promote(epoch=5) == (0, -1)
    assert await h.r.hget(h.qk.meta, "epoch") == "5"
    rand = await h.new(delay_s=0.01)
    due_ms = int(await h.r.zscore(h.qk.delayed, rand) or 0)
    await wait_until(lambda: later_than(h, due_ms), timeout=5, message="task due")

    before = await h.snapshot()
    with pytest.raises(StaleLeaderError) as exc:
        await h.promote(epoch=4)
    assert exc.value.code == "stale_leader"
    assert await h.snapshot() == before  # a deposed leader moves nothing
    assert await h.status(rand) == "scheduled"

    assert await h.promote(epoch=5) == (1, -1)  # the same leadership keeps acting
    assert await h.promote(epoch=6) == (0, -1)
    assert await h.r.hget(h.qk.meta, "epoch") == "6"
    with pytest.raises(StaleLeaderError):
        await h.promote(epoch=5)
    await h.ok(*await h.claim())


async def test_promote_expires_tasks_past_their_ttl(h: Harness) -> None:
    rand = await h.new(delay_s=0.1, ttl_s=0.05)
    due_ms = int(await h.r.zscore(h.qk.delayed, rand) or 0)
    await wait_until(lambda: later_than(h, due_ms), timeout=5, message="task due")
    assert await h.promote() == (0, -1)
    assert await h.status(rand) == "expired"
    assert "task.expired" in await h.event_types(rand)


async def test_promote_with_nothing_delayed(h: Harness) -> None:
    assert await h.promote() == (0, -1)
