"""cancel: queued, scheduled and running tasks, terminal and unknown ones (lua/cancel.lua).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from typing import Any

from dtq_core.protocol.scripts import Finish
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.transitions import (
    Harness,
    held,
)


async def test_cancel_queued(h: Harness) -> None:
    rand = await h.new()
    assert await h.cancel(rand) == ("cancelled", "cancelled")
    t = await h.task(rand)
    assert t["st"] == "cancelled"
    assert "ft" in t
    assert await h.claim() == []  # its entry is skipped and acked
    assert await h.all_pending() == []
    assert await h.event_types(rand) == ["task.queued", "task.cancelled"]


async def test_cancel_scheduled(h: Harness) -> None:
    rand = await h.new(delay_s=100)
    assert await h.cancel(rand) == ("cancelled", "cancelled")
    assert await h.r.zscore(h.qk.delayed, rand) is None
    assert await h.promote() == (0, -1)
    assert await h.status(rand) == "cancelled"


async def test_cancel_running_asks_its_worker(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    pubsub = h.r.pubsub()
    await pubsub.subscribe(h.keys.cancel_channel)
    try:
        await wait_until(lambda: _subscribed(pubsub), timeout=5, message="subscribed")
        assert await h.cancel(rand) == ("requested", "running")
        msg = await wait_until(lambda: _message(pubsub), timeout=5, message="cancel announced")
        assert msg["data"] == h.qk.task(rand)
    finally:
        await pubsub.aclose()
    t = await h.task(rand)
    assert (t["st"], t["cxl"]) == ("running", "1")
    assert await h.finish(Finish(held(c), "cancel")) == ["cancelled"]


async def _subscribed(pubsub: Any) -> bool:
    msg = await pubsub.get_message(timeout=0.05)
    return msg is not None and msg["type"] == "subscribe"


async def _message(pubsub: Any) -> dict[str, Any] | None:
    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
    return msg if msg and msg["type"] == "message" else None


async def test_cancel_terminal_and_unknown(h: Harness) -> None:
    rand = await h.new()
    await h.ok(*await h.claim())
    before = await h.snapshot()
    assert await h.cancel(rand) == ("final", "succeeded")
    assert await h.cancel("f" * 32) == ("not_found", "")
    assert await h.snapshot() == before
