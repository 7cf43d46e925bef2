"""requeue and discard: dead and failed tasks run again or deleted (lua/requeue.lua,
lua/discard.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from typing import Any

from dtq_core.protocol.scripts import Finish
from dtq_devtools.testing.transitions import (
    Harness,
    err,
    held,
)


async def _dead(h: Harness, **kw: Any) -> str:
    rand = await h.new(**kw)
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "dead", err(), "")) == ["dead"]
    return rand


async def test_requeue_a_dead_task(h: Harness) -> None:
    rand = await _dead(h, priority=8)
    assert await h.scripts.requeue(h.qk, [rand], events_maxlen=h.ev, retention_ms=h.ret_ms) == [
        "requeued"
    ]
    t = await h.task(rand)
    assert (t["st"], t["att"]) == ("queued", "0")
    assert "dlq" not in t
    assert "ft" not in t
    assert await h.r.xlen(h.qk.dlq) == 0
    assert len(await h.errors(rand)) == 1  # the history is kept
    (c,) = await h.claim()
    assert (c.rand, c.attempt, c.priority) == (rand, 1, 8)
    await h.ok(c)


async def test_requeue_refuses_other_states(h: Harness) -> None:
    queued = await h.new()
    before = await h.snapshot()
    reply = await h.scripts.requeue(
        h.qk, [queued, "e" * 32], events_maxlen=h.ev, retention_ms=h.ret_ms
    )
    assert reply == ["queued", ""]  # its current status, and "" for no such task
    assert await h.snapshot() == before


async def test_discard(h: Harness) -> None:
    dead = await _dead(h)
    queued = await h.new()
    assert await h.scripts.discard(h.qk, [dead, queued, "e" * 32], events_maxlen=h.ev) == 1
    assert not await h.r.exists(h.qk.task(dead))
    assert await h.r.xlen(h.qk.dlq) == 0
    assert await h.status(queued) == "queued"
    assert "task.discarded" in await h.event_types(dead)
