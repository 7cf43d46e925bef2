"""The Lua transitions against a real redis-server: each script's contract from its header.

After every scenario the ``h`` fixture checks the invariants of failure mode E1
(docs/failure-modes.md) that hold at rest: every task hash and idempotency key has a TTL; each task
sits in the one place its status names (queued: an undelivered entry; running: a pending entry;
scheduled/retrying: the delayed set; terminal: none of them, with a TTL no longer than its
retention); and, from the fault tests' history checker, every key is bounded and no stream entry or
delayed member is an orphan.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.errors import StaleLeaderError
from dtq_core.infra.settings import Settings
from dtq_core.messages import (
    TERMINAL,
    Event,
    StoredError,
    TaskError,
    TaskRequest,
    expand_events,
)
from dtq_core.ops.recovery import reconcile_queue
from dtq_core.protocol.keys import Keys, QueueKeys
from dtq_core.protocol.scripts import Claimed, Finish, Held, ReclaimResult, Scripts, task_defaults
from dtq_core.protocol.submit import flatten, new_rands, prepare
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.history import check_history

WAITING = {"queued", "scheduled", "retrying"}


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def err(attempt: int = 1, message: str = "boom") -> str:
    return msgspec.json.encode(
        TaskError(attempt=attempt, type="ValueError", message=message)
    ).decode()


def held(c: Claimed) -> Held:
    return Held(c.rand, c.priority, c.entry_id, c.lease)


class Harness:
    """One queue, its keys and scripts, and short names for each transition."""

    def __init__(self, redis: aioredis.Redis, settings: Settings, queue: str = "q") -> None:
        self.r = redis
        self.s = settings
        self.keys = Keys(settings.namespace)
        self.qk: QueueKeys = self.keys.queue(queue)
        self.scripts = Scripts(redis)
        self.ret_ms = settings.tasks.retention_s * 1000
        self.result_ms = settings.tasks.result_retention_s * 1000
        self.ev = settings.queues.events_maxlen
        self.check_invariants = True

    def req(self, **kw: Any) -> TaskRequest:
        kw.setdefault("task", "t.x")
        return TaskRequest(queue=self.qk.queue, **kw)

    async def submit(
        self, *reqs: TaskRequest, max_depth: int = 0, idem_ttl_ms: int = 60_000
    ) -> list[tuple[str, str, str]]:
        items = flatten(
            [prepare(r, self.s, rand) for r, rand in zip(reqs, new_rands(len(reqs)), strict=True)]
        )
        reply = await self.scripts.submit(
            self.qk,
            max_depth=max_depth,
            retention_ms=self.ret_ms,
            idem_ttl_ms=idem_ttl_ms,
            events_maxlen=self.ev,
            items=items,
        )
        return [tuple(reply[i : i + 3]) for i in range(0, len(reply), 3)]  # type: ignore[misc]

    async def new(self, **kw: Any) -> str:
        ((outcome, rand, _),) = await self.submit(self.req(**kw))
        assert outcome == "new"
        return rand

    async def claim(
        self, consumer: str = "w1", count: int = 100, adopt: tuple[tuple[int, str, str], ...] = ()
    ) -> list[Claimed]:
        paused, got = await self.scripts.claim(
            self.qk,
            consumer=consumer,
            count=count,
            events_maxlen=self.ev,
            retention_ms=self.ret_ms,
            defaults=task_defaults(self.s.retries.max_attempts, self.s.tasks.timeout_ms),
            adopt=adopt,
        )
        assert not paused
        return got

    async def finish(
        self, *outcomes: Finish, dlq_enabled: bool = True, dlq_maxlen: int | None = None
    ) -> list[str]:
        return await self.scripts.finish(
            self.qk,
            outcomes,
            events_maxlen=self.ev,
            result_retention_ms=self.result_ms,
            retention_ms=self.ret_ms,
            dlq_enabled=dlq_enabled,
            dlq_maxlen=self.s.queues.dlq_maxlen if dlq_maxlen is None else dlq_maxlen,
        )

    async def ok(self, *claimed: Claimed, result: str = '"ok"') -> list[str]:
        return await self.finish(*(Finish(held(c), "ok", result, "") for c in claimed))

    async def reclaim(
        self,
        min_idle_ms: int = 0,
        budget: int = 1000,
        cursors: list[str] | None = None,
        dlq_enabled: bool = True,
        dlq_maxlen: int | None = None,
    ) -> ReclaimResult:
        return await self.scripts.reclaim(
            self.qk,
            consumer="reaper",
            min_idle_ms=min_idle_ms,
            budget=budget,
            events_maxlen=self.ev,
            retention_ms=self.ret_ms,
            dlq_enabled=dlq_enabled,
            dlq_maxlen=self.s.queues.dlq_maxlen if dlq_maxlen is None else dlq_maxlen,
            cursors=cursors or ["0-0"] * 10,
        )

    async def cancel(self, rand: str) -> tuple[str, str]:
        return await self.scripts.cancel(
            self.qk,
            rand,
            events_maxlen=self.ev,
            retention_ms=self.ret_ms,
            channel=self.keys.cancel_channel,
        )

    async def promote(self, epoch: int = 1, limit: int = 100) -> tuple[int, int]:
        return await self.scripts.promote(
            self.qk, epoch=epoch, limit=limit, events_maxlen=self.ev, retention_ms=self.ret_ms
        )

    # -- observations ---------------------------------------------------------------------

    async def task(self, rand: str) -> dict[str, str]:
        return await self.r.hgetall(self.qk.task(rand))

    async def status(self, rand: str) -> str | None:
        return await self.r.hget(self.qk.task(rand), "st")

    async def errors(self, rand: str) -> list[TaskError]:
        raw = await self.r.hget(self.qk.task(rand), "err")
        return [e.view() for e in msgspec.json.decode(raw, type=list[StoredError])] if raw else []

    async def now_ms(self) -> int:
        sec, usec = await self.r.time()
        return int(sec) * 1000 + int(usec) // 1000

    async def pending(self, pri: int) -> list[dict[str, Any]]:
        return await self.r.xpending_range(self.qk.streams[pri], "workers", "-", "+", 10_000)

    async def all_pending(self) -> list[dict[str, Any]]:
        return [p for pri in range(10) for p in await self.pending(pri)]

    async def entry_ids(self, pri: int) -> list[str]:
        return [eid for eid, _ in await self.r.xrange(self.qk.streams[pri])]

    async def group(self, pri: int) -> dict[str, Any]:
        (g,) = await self.r.xinfo_groups(self.qk.streams[pri])
        return g

    async def events(self) -> list[Event]:
        out: list[Event] = []
        for eid, fields in await self.r.xrange(self.qk.events):
            out += expand_events(self.qk.queue, eid, fields)
        return out

    async def event_types(self, rand: str) -> list[str]:
        return [e.type for e in await self.events() if e.task_id == f"{self.qk.queue}:{rand}"]

    async def snapshot(self) -> dict[str, Any]:
        """Every key's full state (streams with their group and PEL), for before/after checks."""
        snap: dict[str, Any] = {}
        async for key in self.r.scan_iter(count=1000):
            kind = await self.r.type(key)
            if kind == "hash":
                snap[key] = await self.r.hgetall(key)
            elif kind == "string":
                snap[key] = await self.r.get(key)
            elif kind == "zset":
                snap[key] = await self.r.zrange(key, 0, -1, withscores=True)
            elif kind == "set":
                snap[key] = await self.r.smembers(key)
            elif kind == "stream":
                groups = await self.r.xinfo_groups(key)
                pel = [
                    (p["message_id"], p["consumer"], p["times_delivered"])
                    for g in groups
                    for p in await self.r.xpending_range(key, g["name"], "-", "+", 100_000)
                ]
                snap[key] = (
                    await self.r.xrange(key),
                    [(g["name"], g["last-delivered-id"], g["pending"]) for g in groups],
                    pel,
                )
            snap[key + "#expires"] = await self.r.pexpiretime(key)
        return snap

    # -- invariants -----------------------------------------------------------------------

    async def assert_invariants(self) -> None:
        ns = self.s.namespace
        # Every key bounded; no entry or delayed member that cannot become an execution
        # (the fault tests' history checker, on the state between transitions).
        check = await check_history(self.r, [], ns=ns)
        assert check.unbounded == [], check.unbounded
        assert check.orphans == [], check.orphans
        async for key in self.r.scan_iter(match=f"{ns}:{{*}}:t:*", count=1000):
            await self._assert_task_in_place(key)

    async def _assert_task_in_place(self, key: str) -> None:
        ttl = await self.r.pttl(key)
        assert ttl > 0, f"task hash {key} has no TTL"
        h = await self.r.hgetall(key)
        st, rand = h["st"], key.rsplit(":", 1)[1]
        prefix = key[: -len(f"t:{rand}")]
        stream = f"{prefix}p{h['pri']}"
        in_delayed = await self.r.zscore(f"{prefix}delayed", rand) is not None
        eid = h.get("eid")
        pending = bool(eid) and bool(await self.r.xpending_range(stream, "workers", eid, eid, 1))
        if st in TERMINAL:
            assert not in_delayed, f"{st} task {rand} is still delayed"
            assert not pending, f"{st} task {rand} is still pending"
            limit = self.result_ms if st == "succeeded" else self.ret_ms
            assert ttl <= limit, f"{st} task {rand} lives {ttl} ms > {limit} ms"
        elif st in {"scheduled", "retrying"}:
            assert in_delayed, f"{st} task {rand} is not in the delayed set"
            assert not pending
        elif st == "queued":
            assert not in_delayed
            assert not pending, f"queued task {rand} has a delivered entry"
            assert await self.r.xrange(stream, eid, eid), f"queued task {rand} has no entry"
            (g,) = await self.r.xinfo_groups(stream)
            assert _id_key(eid) > _id_key(g["last-delivered-id"]), f"{rand}: entry delivered"
        elif st == "running":
            assert not in_delayed
            assert pending, f"running task {rand} has no pending entry"
        else:
            pytest.fail(f"unknown status {st!r} of {key}")


@pytest.fixture
async def h(redis: aioredis.Redis, settings: Settings) -> AsyncIterator[Harness]:
    harness = Harness(redis, settings)
    yield harness
    if harness.check_invariants:
        await harness.assert_invariants()


# == submit ===================================================================================


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


# == claim ====================================================================================


async def test_claim_strict_priority_one_at_a_time(h: Harness) -> None:
    order = [0, 5, 9, 3, 9, 1, 7, 2, 8, 4, 6, 5]
    out = await h.submit(*(h.req(priority=p, args=[i]) for i, p in enumerate(order)))
    rand_pri = {rand: order[i] for i, (_, rand, _) in enumerate(out)}
    got = []
    for _ in order:
        (c,) = await h.claim(count=1)
        got.append(c)
    assert [c.priority for c in got] == sorted(order, reverse=True)
    assert all(rand_pri[c.rand] == c.priority for c in got)
    # FIFO within a priority.
    fives = [c for c in got if c.priority == 5]
    assert [msgspec.json.decode(c.args) for c in fives] == [[1], [11]]
    assert await h.claim(count=1) == []
    await h.ok(*got)


async def test_claim_strict_priority_in_one_batch(h: Harness) -> None:
    await h.submit(*(h.req(priority=p) for p in (0, 3, 9, 1, 9, 8, 2)))
    got = await h.claim(count=100)
    assert [c.priority for c in got] == [9, 9, 8, 3, 2, 1, 0]
    await h.ok(*got)


async def test_claim_newer_high_priority_beats_older_low_priority(h: Harness) -> None:
    await h.submit(h.req(priority=5), h.req(priority=5))
    (first,) = await h.claim(count=1)
    await h.submit(h.req(priority=9))
    (second,) = await h.claim(count=1)
    assert (first.priority, second.priority) == (5, 9)
    (third,) = await h.claim(count=1)
    assert third.priority == 5
    await h.ok(first, second, third)


async def test_claim_batch_count(h: Harness) -> None:
    out = await h.submit(*(h.req(args=[i]) for i in range(10)))
    a = await h.claim(count=4)
    b = await h.claim(count=10, consumer="w2")
    assert (len(a), len(b)) == (4, 6)
    assert await h.claim(count=10) == []
    assert [c.rand for c in a + b] == [rand for _, rand, _ in out]
    for c in a:
        t = await h.task(c.rand)
        assert (t["st"], t["att"], t["lease"], t["w"]) == ("running", "1", "1", "w1")
        assert (c.attempt, c.lease) == (1, "1")
        assert "sa" in t
    assert {p["consumer"] for p in await h.pending(5)} == {"w1", "w2"}
    started = [e for e in await h.events() if e.type == "task.started"]
    assert [e.attempt for e in started] == [1] * 10
    assert {e.worker for e in started} == {"w1", "w2"}
    await h.ok(*a, *b)


async def test_claim_resolves_defaults_left_open_at_submit(h: Harness) -> None:
    rand = await h.new()
    t = await h.task(rand)
    assert "max" not in t
    assert "to" not in t
    (c,) = await h.claim()
    assert (c.max_attempts, c.timeout_ms) == (h.s.retries.max_attempts, h.s.tasks.timeout_ms)
    t = await h.task(rand)
    assert (t["max"], t["to"]) == (str(h.s.retries.max_attempts), str(h.s.tasks.timeout_ms))
    explicit = await h.new(max_attempts=3, timeout_s=2)
    (c2,) = await h.claim()
    assert c2.rand == explicit
    assert (c2.max_attempts, c2.timeout_ms) == (3, 2000)
    await h.ok(c, c2)


async def test_claim_skips_cancelled_and_duplicate_entries(h: Harness) -> None:
    (_, a, _), (_, b, _), (_, c, _) = await h.submit(h.req(), h.req(), h.req())
    assert await h.cancel(b) == ("cancelled", "cancelled")
    # A duplicate entry of task a (e.g. a re-sent XADD): it must never be a second execution.
    dup = await h.r.xadd(h.qk.streams[5], {"t": a})
    got = await h.claim()
    assert [x.rand for x in got] == [a, c]
    # Skipped entries are acked and deleted, never left pending.
    assert {p["message_id"] for p in await h.pending(5)} == {x.entry_id for x in got}
    assert dup not in await h.entry_ids(5)
    assert await h.claim() == []
    await h.ok(*got)
    assert await h.all_pending() == []
    assert await h.status(b) == "cancelled"


async def test_claim_expired_ttl(h: Harness) -> None:
    rand = await h.new(ttl_s=0.05)
    exp_ms = int((await h.task(rand))["exp"]) // 1000
    await wait_until(lambda: _later_than(h, exp_ms), timeout=5, message="ttl passed")
    assert await h.claim() == []
    t = await h.task(rand)
    assert t["st"] == "expired"
    assert "ft" in t
    assert await h.all_pending() == []
    assert await h.r.xlen(h.qk.streams[5]) == 0
    assert await h.event_types(rand) == ["task.queued", "task.expired"]


async def _later_than(h: Harness, ms: int) -> bool:
    return await h.now_ms() > ms + 1


async def test_claim_of_an_entry_without_hash_acks_it(h: Harness) -> None:
    rand = await h.new()
    keep = await h.new()
    await h.r.delete(h.qk.task(rand))
    got = await h.claim()
    assert [c.rand for c in got] == [keep]
    assert [p["message_id"] for p in await h.pending(5)] == [got[0].entry_id]
    assert len(await h.entry_ids(5)) == 1
    await h.ok(*got)


async def test_claim_adopts_entries_of_the_wake_up_read(h: Harness) -> None:
    rand = await h.new(priority=4)
    ((_, entries),) = await h.r.xreadgroup("workers", "w1", {h.qk.streams[4]: ">"}, count=1)
    ((eid, fields),) = entries
    assert fields == {"t": rand}
    (c,) = await h.claim(count=1, adopt=((4, eid, rand),))
    assert (c.rand, c.entry_id, c.attempt) == (rand, eid, 1)
    await h.ok(c)


async def test_a_retried_claim_reports_what_its_lost_reply_started(h: Harness) -> None:
    """The claim that adopted a wake-up delivery ran, but its reply was lost with the
    connection; the worker sends the same claim again. It gets the same attempt back (same
    lease, no second start), and the entry stays pending: never acked under a live attempt."""
    rand = await h.new()
    ((_, entries),) = await h.r.xreadgroup("workers", "w1", {h.qk.streams[5]: ">"}, count=1)
    eid = entries[0][0]
    (first,) = await h.claim("w1", count=4, adopt=((5, eid, rand),))
    (again,) = await h.claim("w1", count=4, adopt=((5, eid, rand),))
    assert (again.rand, again.entry_id, again.lease, again.attempt) == (
        first.rand,
        first.entry_id,
        first.lease,
        first.attempt,
    )
    assert [p["message_id"] for p in await h.all_pending()] == [eid]
    assert await h.event_types(rand) == ["task.queued", "task.started"]
    # Another worker retrying a claim with that entry leaves it alone.
    assert await h.claim("w2", count=4, adopt=((5, eid, rand),)) == []
    assert [p["message_id"] for p in await h.all_pending()] == [eid]
    # And a hand-back of it (count 0) leaves it to its lease too.
    await h.claim("w1", count=0, adopt=((5, eid, rand),))
    assert [p["message_id"] for p in await h.all_pending()] == [eid]
    assert await h.ok(first) == ["succeeded"]


async def test_paused_queue_hands_adopted_entries_back(h: Harness) -> None:
    rand = await h.new()
    await h.r.hset(h.qk.meta, "paused", "1")
    ((_, ((eid, _),)),) = await h.r.xreadgroup("workers", "w1", {h.qk.streams[5]: ">"}, count=1)
    paused, got = await h.scripts.claim(
        h.qk,
        consumer="w1",
        count=10,
        events_maxlen=h.ev,
        retention_ms=h.ret_ms,
        defaults=task_defaults(10, 1000),
        adopt=((5, eid, rand),),
    )
    assert (paused, got) == (True, [])
    assert await h.all_pending() == []
    t = await h.task(rand)
    assert t["st"] == "queued"
    assert t.get("att", "0") == "0"
    assert t["eid"] != eid  # a fresh undelivered entry
    await h.r.hset(h.qk.meta, "paused", "0")
    (c,) = await h.claim()
    assert c.rand == rand
    await h.ok(c)


async def test_claim_count_zero_hands_adopted_entries_back(h: Harness) -> None:
    rand = await h.new()
    ((_, ((eid, _),)),) = await h.r.xreadgroup("workers", "w1", {h.qk.streams[5]: ">"}, count=1)
    assert await h.claim(count=0, adopt=((5, eid, rand),)) == []
    assert await h.all_pending() == []
    assert await h.status(rand) == "queued"


# == finish ===================================================================================


async def test_finish_ok(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "ok", '{"a":1}', "1")) == ["succeeded"]
    t = await h.task(rand)
    assert (t["st"], t["res"], t["rtr"]) == ("succeeded", '{"a":1}', "1")
    assert "ft" in t
    assert 0 < await h.r.pttl(h.qk.task(rand)) <= h.result_ms
    assert await h.all_pending() == []
    assert await h.event_types(rand) == ["task.queued", "task.started", "task.succeeded"]


async def test_finish_retry_then_promote_runs_the_next_attempt(h: Harness) -> None:
    rand = await h.new(max_attempts=3)
    (c,) = await h.claim()
    before = await h.now_ms()
    assert await h.finish(Finish(held(c), "retry", err(1), "300")) == ["retrying"]
    after = await h.now_ms()
    assert await h.status(rand) == "retrying"
    score = await h.r.zscore(h.qk.delayed, rand)
    assert score is not None
    assert before + 300 <= score <= after + 301  # rounded up to the ms
    assert [e.message for e in await h.errors(rand)] == ["boom"]
    assert await h.all_pending() == []
    promoted, next_due = await h.promote()
    if promoted == 0:  # not due yet: the next due time is reported
        assert next_due == int(score)
        await wait_until(lambda: _later_than(h, int(score)), timeout=5, message="retry due")
        assert (await h.promote())[0] == 1
    (c2,) = await h.claim()
    assert (c2.rand, c2.attempt) == (rand, 2)
    assert int(c2.lease) > int(c.lease)
    await h.ok(c2)
    assert len(await h.errors(rand)) == 1  # the history stays


async def test_finish_dead_goes_to_the_dlq(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "dead", err(1, "fatal"), "")) == ["dead"]
    t = await h.task(rand)
    assert t["st"] == "dead"
    ((dlq_id, fields),) = await h.r.xrange(h.qk.dlq)
    assert t["dlq"] == dlq_id
    assert fields["t"] == rand
    assert fields["task"] == "t.x"
    assert msgspec.json.decode(fields["err"])["message"] == "fatal"
    assert 0 < await h.r.pttl(h.qk.task(rand)) <= h.ret_ms
    assert await h.all_pending() == []
    assert "task.dead" in await h.event_types(rand)


async def test_finish_dead_without_dlq_is_failed(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "dead", err(), ""), dlq_enabled=False) == ["failed"]
    assert await h.status(rand) == "failed"
    assert await h.r.xlen(h.qk.dlq) == 0
    assert "task.failed" in await h.event_types(rand)


async def _bury(h: Harness, n: int, maxlen: int) -> list[str]:
    """``n`` tasks, each claimed and finished dead with a DLQ of ``maxlen`` entries."""
    rands = []
    for _ in range(n):
        rands.append(await h.new())
        (c,) = await h.claim()
        assert await h.finish(Finish(held(c), "dead", err(), ""), dlq_maxlen=maxlen) == ["dead"]
    return rands


async def test_the_dlq_trim_deletes_the_records_of_the_entries_it_drops(h: Harness) -> None:
    """G5: the DLQ cap bounds the dead records too; the oldest go with their entries, with
    one task.discarded event (reason dlq_trimmed) per call."""
    rands = await _bury(h, 8, maxlen=3)
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
    (rand,) = await _bury(h, 1, maxlen=10)
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
    await _bury(h, 130, maxlen=1000)
    await _bury(h, 1, maxlen=10)
    assert await h.r.xlen(h.qk.dlq) == 31
    await _bury(h, 1, maxlen=10)
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


async def test_finish_cancel(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    assert await h.finish(Finish(held(c), "cancel")) == ["cancelled"]
    assert await h.status(rand) == "cancelled"
    assert await h.all_pending() == []


async def test_finish_a_mixed_batch(h: Harness) -> None:
    await h.submit(*(h.req(priority=p) for p in (9, 7, 5, 3)))
    a, b, c, d = await h.claim()
    res = await h.finish(
        Finish(held(a), "ok", "1", ""),
        Finish(held(b), "retry", err(), "1000"),
        Finish(held(c), "dead", err(), ""),
        Finish(held(d), "cancel"),
    )
    assert res == ["succeeded", "retrying", "dead", "cancelled"]
    assert await h.all_pending() == []


async def test_stale_finish_changes_nothing(h: Harness) -> None:
    """F5: the worker whose attempt was reclaimed cannot ack or overwrite the newer attempt."""
    rand = await h.new()
    (old,) = await h.claim(consumer="w1")
    assert (await h.reclaim(min_idle_ms=0)).requeued == 1
    (new,) = await h.claim(consumer="w2")
    assert new.rand == rand
    assert new.lease != old.lease

    before = await h.snapshot()
    for outcome in ("ok", "retry", "dead", "cancel"):
        extra = "10" if outcome == "retry" else ""
        assert await h.finish(Finish(held(old), outcome, err(), extra)) == ["stale"]
    # Right lease, wrong entry; and an entry id of the old attempt with the new lease.
    wrong_eid = Held(rand, new.priority, old.entry_id, new.lease)
    assert await h.finish(Finish(wrong_eid, "ok", "1", "")) == ["stale"]
    assert await h.snapshot() == before
    assert [(p["message_id"], p["consumer"]) for p in await h.pending(5)] == [(new.entry_id, "w2")]
    assert await h.ok(new) == ["succeeded"]
    after = await h.snapshot()
    # The same finish again (its reply was lost) is a replay: it changes nothing.
    assert await h.ok(new, result='"other"') == ["succeeded"]
    assert await h.snapshot() == after


@pytest.mark.parametrize(
    ("outcome", "extra", "status", "dlq_enabled"),
    [
        ("ok", "", "succeeded", True),
        ("retry", "60000", "retrying", True),
        ("dead", "", "dead", True),
        ("dead", "", "failed", False),
        ("cancel", "", "cancelled", True),
    ],
)
async def test_a_finish_sent_again_gets_its_own_status_and_changes_nothing(
    h: Harness, outcome: str, extra: str, status: str, dlq_enabled: bool
) -> None:
    """A2: a finish whose reply was lost is sent again by the worker; the attempt's outcome
    is already recorded, so the replay answers the status it set (never ``stale`` for the
    worker's own success), writes no second terminal event and acks nothing twice."""
    rand = await h.new()
    (c,) = await h.claim()
    payload = err() if outcome in {"retry", "dead"} else '"r"'
    finish = Finish(held(c), outcome, payload, extra)
    assert await h.finish(finish, dlq_enabled=dlq_enabled) == [status]
    before = await h.snapshot()
    assert await h.finish(finish, dlq_enabled=dlq_enabled) == [status]
    assert await h.snapshot() == before
    assert (await h.event_types(rand)).count(f"task.{status}") == 1


async def test_a_replayed_retry_keeps_its_status_after_the_next_attempt_began(
    h: Harness,
) -> None:
    """The retried attempt's outcome stays its own after the task moved on; the newer
    attempt's lease still fences it off from anything else."""
    rand = await h.new(max_attempts=3)
    (c,) = await h.claim()
    retry = Finish(held(c), "retry", err(1), "0")
    assert await h.finish(retry) == ["retrying"]
    await wait_until(lambda: _promoted(h), timeout=5, message="retry promoted")
    (c2,) = await h.claim(consumer="w2")
    assert (c2.rand, c2.attempt) == (rand, 2)
    before = await h.snapshot()
    assert await h.finish(retry) == ["retrying"]
    assert await h.snapshot() == before
    assert await h.ok(c2) == ["succeeded"]


async def _promoted(h: Harness) -> bool:
    return (await h.promote())[0] == 1


async def test_a_finish_after_the_reaper_buried_the_attempt_is_stale(h: Harness) -> None:
    """Only the attempt's own recorded finish is a replay: a task buried by the reaper with
    the same lease (attempts exhausted) refuses the late finish as stale."""
    rand = await h.new(max_attempts=1)
    (c,) = await h.claim()
    assert (await h.reclaim(min_idle_ms=0)).buried == 1
    assert await h.status(rand) == "dead"
    before = await h.snapshot()
    assert await h.ok(c) == ["stale"]
    assert await h.snapshot() == before


async def test_finish_of_a_waiting_task_is_stale(h: Harness) -> None:
    rand = await h.new()
    (c,) = await h.claim()
    await h.scripts.release(h.qk, [held(c)], events_maxlen=h.ev, reason="drain")
    before = await h.snapshot()
    assert await h.ok(c) == ["stale"]
    assert await h.snapshot() == before
    assert await h.status(rand) == "queued"


async def test_finishing_keeps_work_streams_bounded(h: Harness) -> None:
    await h.submit(*(h.req(priority=6) for _ in range(500)))
    await h.submit(*(h.req(priority=6) for _ in range(500)))
    done = 0
    while batch := await h.claim(count=100):
        assert set(await h.ok(*batch)) == {"succeeded"}
        done += len(batch)
    assert done == 1000
    assert await h.r.xlen(h.qk.streams[6]) < 150
    assert await h.pending(6) == []


async def test_trimming_never_drops_undelivered_entries(h: Harness) -> None:
    out = await h.submit(*(h.req() for _ in range(400)))
    rands = [rand for _, rand, _ in out]
    done = []
    for _ in range(3):
        batch = await h.claim(count=100)
        await h.ok(*batch)
        done += [c.rand for c in batch]
    # 100 entries were never delivered: all of them survive the trims and are claimable.
    rest = await h.claim(count=1000)
    assert [c.rand for c in rest] == rands[300:]
    assert done == rands[:300]
    await h.ok(*rest)


async def test_trimming_keeps_the_oldest_pending_entry(h: Harness) -> None:
    await h.submit(*(h.req() for _ in range(300)))
    (slow,) = await h.claim(count=1, consumer="slow")
    while batch := await h.claim(count=100):
        await h.ok(*batch)
    # Entries at and above the oldest pending one stay; it can still be finished.
    assert slow.entry_id in await h.entry_ids(5)
    assert await h.ok(slow) == ["succeeded"]
    # The next finish may trim everything below the group's position.
    await h.submit(h.req())
    await h.ok(*await h.claim())
    assert await h.r.xlen(h.qk.streams[5]) < 150


# == extend_lease =============================================================================


async def _idle_ms(h: Harness, pri: int, eid: str) -> int:
    (p,) = await h.r.xpending_range(h.qk.streams[pri], "workers", eid, eid, 1)
    return int(p["time_since_delivered"])


async def test_extend_lease_resets_the_idle_time(h: Harness) -> None:
    await h.new()
    (c,) = await h.claim()
    await wait_until(lambda: _idle_at_least(h, c, 300), timeout=5, message="idle 300 ms")
    assert await h.scripts.extend_lease(h.qk, "w1", [held(c)]) == ([], [])
    assert await _idle_ms(h, 5, c.entry_id) < 300
    assert (await h.reclaim(min_idle_ms=300)).requeued == 0
    assert [p["consumer"] for p in await h.pending(5)] == ["w1"]
    await h.ok(c)


async def _idle_at_least(h: Harness, c: Claimed, ms: int) -> bool:
    return await _idle_ms(h, c.priority, c.entry_id) >= ms


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


# == release ==================================================================================


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


# == reclaim ==================================================================================


async def test_reclaim_after_the_visibility_timeout(h: Harness) -> None:
    rand = await h.new(max_attempts=5)
    (c,) = await h.claim(consumer="w1")
    assert (await h.reclaim(min_idle_ms=60_000)).requeued == 0
    await wait_until(lambda: _idle_at_least(h, c, 50), timeout=5, message="idle 50 ms")
    res = await h.reclaim(min_idle_ms=50)
    assert (res.requeued, res.buried, res.lost) == (1, 0, 0)
    assert res.cursors == ["0-0"] * 10
    t = await h.task(rand)
    assert t["st"] == "queued"
    assert t["att"] == "1"  # counted at claim, kept
    assert int(t["lease"]) > int(c.lease)
    (e,) = await h.errors(rand)
    assert (e.attempt, e.reason, e.worker, e.type) == (1, "lease_expired", "w1", "LeaseExpired")
    assert any(
        ev.type == "task.requeued" and ev.reason == "lease_expired" for ev in await h.events()
    )
    (c2,) = await h.claim(consumer="w2")
    assert (c2.rand, c2.attempt) == (rand, 2)
    await h.ok(c2)


@pytest.mark.parametrize(("dlq", "final"), [(True, "dead"), (False, "failed")])
async def test_reclaim_spends_the_attempt_budget(h: Harness, dlq: bool, final: str) -> None:
    """F4/A7: a task that kills every worker that claims it ends in the DLQ after its budget."""
    rand = await h.new(max_attempts=2)
    for attempt in (1, 2):
        (c,) = await h.claim(consumer=f"w{attempt}")
        assert c.attempt == attempt
        res = await h.reclaim(min_idle_ms=0, dlq_enabled=dlq)
        assert (res.requeued, res.buried) == ((1, 0) if attempt == 1 else (0, 1))
    assert await h.status(rand) == final
    errors = await h.errors(rand)
    assert [(e.attempt, e.reason) for e in errors] == [(1, "lease_expired"), (2, "lease_expired")]
    assert await h.all_pending() == []
    assert await h.r.xlen(h.qk.streams[5]) == 0
    assert await h.claim() == []
    assert await h.r.xlen(h.qk.dlq) == (1 if dlq else 0)
    assert f"task.{final}" in await h.event_types(rand)


async def test_reclaim_follows_cursors_within_its_budget(h: Harness) -> None:
    await h.submit(*(h.req() for _ in range(5)))
    claimed = await h.claim()
    first = await h.reclaim(min_idle_ms=0, budget=2)
    assert first.requeued == 2
    assert first.cursors[5] != "0-0"  # more to scan: the caller passes the cursor back
    second = await h.reclaim(min_idle_ms=0, budget=2, cursors=first.cursors)
    assert second.requeued == 2
    assert second.cursors[5] != "0-0"
    third = await h.reclaim(min_idle_ms=0, budget=2, cursors=second.cursors)
    assert third.requeued == 1
    assert third.cursors == ["0-0"] * 10
    for c in claimed:
        assert await h.status(c.rand) == "queued"
    again = await h.claim()
    assert sorted(c.rand for c in again) == sorted(c.rand for c in claimed)
    assert {c.attempt for c in again} == {2}
    await h.ok(*again)


async def test_reclaim_scans_a_bounded_part_of_a_pel_that_is_not_idle_yet(h: Harness) -> None:
    """G4: a worker that died a moment ago holding thousands of entries. Before they are idle,
    one call scans at most 10 x its budget of them and hands the cursor back; it never walks
    the whole PEL in one call (a stall of every client while it runs)."""
    n = 3_000
    for start in range(0, n, 500):
        await h.submit(*(h.req() for _ in range(min(500, n - start))))
    held = 0
    while held < n:
        held += len(await h.claim(consumer="dead", count=500))
    calls, cursors = 0, ["0-0"] * 10
    while True:
        res = await h.reclaim(min_idle_ms=60_000, budget=100, cursors=cursors)
        assert (res.requeued, res.buried) == (0, 0)
        calls, cursors = calls + 1, res.cursors
        if cursors == ["0-0"] * 10:
            break
        assert calls < 100, "the cursor never came back to 0-0"
    # 3,000 entries, at most 1,000 scanned per call: three calls at least.
    assert calls >= 3
    assert len(await h.pending(5)) == n
    # Once idle, everything is taken back within the entry budget, call after call.
    requeued, cursors = 0, ["0-0"] * 10
    while requeued < n:
        res = await h.reclaim(min_idle_ms=0, budget=100, cursors=cursors)
        assert 0 < res.requeued <= 100
        requeued, cursors = requeued + res.requeued, res.cursors
    assert await h.all_pending() == []


async def test_reclaim_reports_entries_trimmed_while_pending(h: Harness) -> None:
    """F1: an operator's XTRIM MAXLEN drops pending entries; reclaim reports them as lost."""
    h.check_invariants = False  # the trim itself breaks the invariants on purpose
    await h.submit(h.req(), h.req(), h.req())
    assert len(await h.claim()) == 3
    await h.r.xtrim(h.qk.streams[5], maxlen=0)
    res = await h.reclaim(min_idle_ms=0)
    assert (res.requeued, res.lost) == (0, 3)
    assert await h.all_pending() == []


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
    (old,) = await _bury(h, 1, maxlen=10)
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


@pytest.mark.parametrize("where", ["promote", "claim"])
async def test_a_task_whose_record_expired_is_reported_expired(h: Harness, where: str) -> None:
    rand = await h.new(delay_s=0.05) if where == "promote" else await h.new()
    await h.r.pexpire(h.qk.task(rand), 1)  # its record outlived by its place in the queue
    await wait_until(lambda: _gone(h, rand), timeout=5, message="record expired")
    due_ms = int(await h.r.zscore(h.qk.delayed, rand) or 0)
    await wait_until(lambda: _later_than(h, due_ms), timeout=5, message="due")
    if where == "promote":
        await h.promote()
    else:
        assert await h.claim() == []
    assert await h.event_types(rand) == [
        "task.queued" if where == "claim" else "task.scheduled",
        "task.expired",
    ]


async def _gone(h: Harness, rand: str) -> bool:
    return not await h.r.exists(h.qk.task(rand))


async def test_reclaim_acks_entries_of_finished_or_missing_tasks(h: Harness) -> None:
    a = await h.new()
    b = await h.new()
    ca, cb = await h.claim()
    await h.r.delete(h.qk.task(a))
    await h.r.hset(h.qk.task(b), "st", "cancelled")  # ended without its entry being acked
    res = await h.reclaim(min_idle_ms=0)
    assert (res.requeued, res.buried, res.lost) == (0, 0, 0)
    assert await h.all_pending() == []
    assert await h.r.xlen(h.qk.streams[5]) == 0
    assert (ca.rand, cb.rand) == (a, b)


async def test_reclaim_puts_back_a_delivery_its_worker_never_received(h: Harness) -> None:
    """A worker's blocking wake-up read delivered an entry, and the reply was lost with the
    connection: the entry sits in that consumer's PEL while the task still says `queued`.
    The reaper puts it back as it was (no attempt spent), instead of dropping it."""
    rand = await h.new()
    delivered = await h.r.xreadgroup("workers", "w-lost", {h.qk.streams[5]: ">"}, count=1)
    assert delivered[0][1][0][1]["t"] == rand
    res = await h.reclaim(min_idle_ms=0)
    assert (res.requeued, res.buried, res.lost) == (1, 0, 0)
    t = await h.task(rand)
    assert t["st"] == "queued"
    assert "err" not in t  # nothing failed
    (c,) = await h.claim("w2")
    assert (c.rand, c.attempt) == (rand, 1)


# == cancel ===================================================================================


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


# == requeue and discard ======================================================================


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


# == promote ==================================================================================


async def test_promote_moves_due_tasks_within_its_limit(h: Harness) -> None:
    due = [await h.new(delay_s=0.05, priority=p) for p in (1, 2, 3)]
    later = await h.new(delay_s=100)
    due_ms = max([int(await h.r.zscore(h.qk.delayed, r) or 0) for r in due])
    await wait_until(lambda: _later_than(h, due_ms), timeout=5, message="tasks due")

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
    await wait_until(lambda: _later_than(h, due_ms), timeout=5, message="task due")

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
    await wait_until(lambda: _later_than(h, due_ms), timeout=5, message="task due")
    assert await h.promote() == (0, -1)
    assert await h.status(rand) == "expired"
    assert "task.expired" in await h.event_types(rand)


async def test_promote_with_nothing_delayed(h: Harness) -> None:
    assert await h.promote() == (0, -1)


# == purge ====================================================================================


async def test_purge_cancels_waiting_tasks_and_leaves_running_ones(h: Harness) -> None:
    running = await h.new(priority=9)
    (c,) = await h.claim()
    queued = [await h.new(priority=p) for p in (0, 4, 8)]
    scheduled = [await h.new(delay_s=100), await h.new(delay_s=200)]
    n = await h.scripts.purge(h.qk, limit=100, events_maxlen=h.ev, retention_ms=h.ret_ms)
    assert n == (5, 5)  # (entries read, tasks cancelled)
    for rand in queued + scheduled:
        assert await h.status(rand) == "cancelled"
    assert await h.status(running) == "running"
    assert await h.r.zcard(h.qk.delayed) == 0
    assert all([(await h.group(p))["lag"] == 0 for p in range(10)])
    assert await h.claim() == []
    assert any(e.type == "task.cancelled" and e.reason == "purged" for e in await h.events())
    again = await h.scripts.purge(h.qk, limit=100, events_maxlen=h.ev, retention_ms=h.ret_ms)
    assert again == (0, 0)
    await h.ok(c)


async def test_purge_respects_its_limit(h: Harness) -> None:
    await h.submit(*(h.req() for _ in range(3)), h.req(delay_s=100), h.req(delay_s=100))
    counts = [
        await h.scripts.purge(h.qk, limit=2, events_maxlen=h.ev, retention_ms=h.ret_ms)
        for _ in range(4)
    ]
    assert counts == [(2, 2), (2, 2), (1, 1), (0, 0)]


async def test_purge_reads_but_does_not_count_tasks_cancelled_before(h: Harness) -> None:
    cancelled = await h.new()
    waiting = await h.new()
    assert await h.cancel(cancelled) == ("cancelled", "cancelled")
    n = await h.scripts.purge(h.qk, limit=100, events_maxlen=h.ev, retention_ms=h.ret_ms)
    assert n == (2, 1)
    assert await h.status(waiting) == "cancelled"
    assert (await h.group(5))["lag"] == 0


# == progress =================================================================================


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


# == global scripts ===========================================================================


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
    await wait_until(lambda: _later_than(h, stamp + 50), timeout=5, message="50 ms passed")
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
