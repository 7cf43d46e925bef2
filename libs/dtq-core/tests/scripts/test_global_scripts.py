"""The global single-key functions: leader_lease, heartbeat, stale_workers, and prune_consumers
(lua/).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from dtq_devtools.testing import wait_until
from dtq_devtools.testing.transitions import (
    Harness,
    later_than,
)


async def test_leader_lease(h: Harness) -> None:
    key = h.keys.leader
    assert await h.scripts.leader_lease(key, "acquire", "1:a", 5000)
    assert not await h.scripts.leader_lease(key, "acquire", "2:b", 5000)
    assert not await h.scripts.leader_lease(key, "renew", "2:b", 5000)
    assert await h.scripts.leader_lease(key, "renew", "1:a", 5000)
    assert 0 < await h.r.pttl(key) <= 5000
    assert not await h.scripts.leader_lease(key, "release", "2:b", 5000)
    assert await h.scripts.leader_lease(key, "release", "1:a", 5000)
    assert await h.scripts.leader_lease(key, "acquire", "2:b", 5000)


async def test_worker_heartbeats_and_stale_workers(h: Harness) -> None:
    stamp = await h.scripts.heartbeat(h.keys.workers, "w1")
    assert abs(stamp - await h.now_ms()) < 1000
    assert await h.scripts.stale_workers(h.keys.workers, 60_000) == []
    await wait_until(lambda: later_than(h, stamp + 50), timeout=5, message="50 ms passed")
    await h.scripts.heartbeat(h.keys.workers, "w2")
    assert await h.scripts.stale_workers(h.keys.workers, 50) == ["w1"]
    assert await h.r.zrange(h.keys.workers, 0, -1) == ["w2"]


async def _consumers(h: Harness) -> dict[str, int]:
    """Every consumer of the queue's groups and the entries it holds (all priorities)."""
    out: dict[str, int] = {}
    for stream in h.qk.streams:
        if not await h.r.exists(stream):
            continue
        for c in await h.r.xinfo_consumers(stream, "workers"):
            out[c["name"]] = out.get(c["name"], 0) + int(c["pending"])
    return out


async def test_prune_consumers_deletes_only_those_holding_nothing(h: Harness) -> None:
    await h.new()
    await h.new()
    (kept,) = await h.claim("holding", count=1)
    (done,) = await h.claim("finished", count=1)
    await h.ok(done)
    await h.r.xgroup_createconsumer(h.qk.streams[5], "workers", "idle")
    assert await _consumers(h) == {"holding": 1, "finished": 0, "idle": 0}

    # Idle for less than asked: nothing goes.
    assert await h.scripts.prune_consumers(h.qk, min_idle_ms=3_600_000) == 0
    # Only one named consumer.
    assert await h.scripts.prune_consumers(h.qk, min_idle_ms=0, only="finished") == 1
    assert await _consumers(h) == {"holding": 1, "idle": 0}
    # Every consumer that holds nothing; the one holding an entry stays, and so does its entry.
    assert await h.scripts.prune_consumers(h.qk, min_idle_ms=0) == 1
    assert await _consumers(h) == {"holding": 1}
    assert await h.ok(kept) == ["succeeded"]
    # A deleted consumer that reads again is simply created again.
    await h.new()
    assert len(await h.claim("idle")) == 1
    # A queue with no streams yet is not an error.
    empty = Harness(h.r, h.s, queue="never-used")
    assert await empty.scripts.prune_consumers(empty.qk, min_idle_ms=0) == 0


async def test_register_queues_keeps_the_registry_bound_for_any_number_of_names(
    h: Harness,
) -> None:
    """A worker re-registers every queue it serves at each heartbeat, many at once: names
    already there are always accepted, new ones only while the bound leaves room, a name given
    twice counts once."""
    key = h.keys.queues
    await h.r.delete(key)
    first = [f"q{i}" for i in range(1500)]
    assert await h.scripts.register_queues(key, first, 1502) == [True] * 1500
    again = [*first, "new-a", "new-a", "new-b", "new-c"]
    flags = await h.scripts.register_queues(key, again, 1502)
    assert flags == [True] * 1500 + [True, True, True, False]
    assert await h.r.scard(key) == 1502
    assert await h.scripts.register_queues(key, ["x", "q7"], 0) == [True, True]  # 0: no bound
    assert await h.r.scard(key) == 1503
    await h.r.delete(key)
