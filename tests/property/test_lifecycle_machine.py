"""E1: the task lifecycle as a state machine, driven against real Redis.

Hypothesis calls the real transition scripts in random order (submit, claim, finish with
every outcome, a finish with a stale lease, heartbeat, hand-back, reclaim as if every worker
died, promotion, cancel, DLQ requeue, a queue concurrency limit set or cleared, grouped tasks,
a group concurrency limit set or cleared, a group paused or resumed) and a Python model says
what must hold after each step: each task is in exactly the place its status says, attempts
never exceed the budget, a stale lease changes nothing, claims follow strict priority among
ungrouped tasks and start exactly what the concurrency limits leave room for (a claim never
starts a task of a paused or full group, and never leaves a task it could start), a group's
running set is its running tasks, every record has a TTL.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from dtq_core.infra.connection import connect
from dtq_core.infra.settings import load_settings
from dtq_core.messages import TaskError, TaskRequest
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.scripts import Claimed, Finish, Held, Scripts, task_defaults
from dtq_core.protocol.submit import new_rands, prepare
from dtq_devtools.testing import RedisServer

pytestmark = pytest.mark.slow

WAITING = {"queued", "scheduled", "retrying"}
TERMINAL = {"succeeded", "dead", "failed", "cancelled", "expired"}
ERR = msgspec.json.encode(TaskError(attempt=1, type="E", message="m")).decode()


@dataclass
class Model:
    status: str
    priority: int
    max_attempts: int
    attempts: int = 0
    held: Held | None = None
    stale: list[Held] = field(default_factory=list)
    cancel_requested: bool = False
    group: str | None = None
    finished: Held | None = None
    """The attempt whose finish was recorded last: that finish sent again is answered with
    its own status, not ``stale`` (the task hash's ``fin``)."""


class Lifecycle(RuleBasedStateMachine):
    url = ""
    tasks = Bundle("tasks")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.settings = load_settings({}, redis_url=self.url)
        self.redis: aioredis.Redis = connect(self.settings)
        self.scripts = Scripts(self.redis)
        self.qk = Keys().queue("m")
        self.model: dict[str, Model] = {}
        self.defaults = task_defaults(10, 30000)
        self.limit: int | None = None
        """The queue's concurrency limit (docs/flow-control.md), when one is set."""
        self.group_limit: int | None = None
        self.paused: set[str] = set()
        """Paused groups."""
        self.run(self.redis.flushall())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.redis.aclose())
        self.loop.close()

    # -- rules --------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        assert self.run(self.redis.dbsize()) == 0

    @rule(
        target=tasks,
        priority=st.integers(0, 9),
        delayed=st.booleans(),
        max_attempts=st.integers(1, 3),
        group=st.sampled_from([None, None, "a", "b"]),
    )
    def submit(self, priority: int, delayed: bool, max_attempts: int, group: str | None) -> str:
        rand = new_rands(1)[0]
        req = TaskRequest(
            task="t",
            queue="m",
            priority=priority,
            max_attempts=max_attempts,
            delay_s=0.001 if delayed else None,
            group=group,
        )
        reply = self.run(
            self.scripts.submit(
                self.qk,
                [prepare(req, self.settings, rand)],
                max_depth=0,
                retention_ms=600_000,
                idem_ttl_ms=60_000,
                events_maxlen=10_000,
            )
        )
        assert reply == ["new", rand, "scheduled" if delayed else "queued"]
        self.model[rand] = Model(
            "scheduled" if delayed else "queued", priority, max_attempts, group=group
        )
        return rand

    @rule(limit=st.one_of(st.none(), st.integers(1, 3)))
    def set_concurrency_limit(self, limit: int | None) -> None:
        """As ``Admin.configure(concurrency=...)`` writes it (one partition: its whole)."""
        if limit is None:
            self.run(self.redis.hdel(self.qk.meta, "lim_c"))
        else:
            self.run(self.redis.hset(self.qk.meta, "lim_c", str(limit)))
        self.limit = limit

    @rule(limit=st.one_of(st.none(), st.integers(1, 2)))
    def set_group_limit(self, limit: int | None) -> None:
        """As ``Admin.configure(group_concurrency=...)`` does it: the limit, then each group
        refills."""
        if limit is None:
            self.run(self.redis.hdel(self.qk.meta, "lim_gc"))
        else:
            self.run(self.redis.hset(self.qk.meta, "lim_gc", str(limit)))
        self.group_limit = limit
        for group in ("a", "b"):
            self.run(self.scripts.group_set(self.qk, group, paused=None, weight=None))
        self.claim(4)  # a lower limit holds at once for tasks already in a stream

    @rule(group=st.sampled_from(["a", "b"]), paused=st.booleans())
    def pause_group(self, group: str, paused: bool) -> None:
        stats = self.run(self.scripts.group_set(self.qk, group, paused=paused, weight=None))
        assert stats[0] == int(paused)
        (self.paused.add if paused else self.paused.discard)(group)
        self.claim(4)  # a paused group's task already in a stream is not started

    def _runnable(self) -> list[tuple[int, str]]:
        """The queued tasks a claim may start now, by priority: ungrouped ones, and those of
        groups neither paused nor at their limit."""
        running: dict[str | None, int] = {}
        for m in self.model.values():
            if m.status == "running":
                running[m.group] = running.get(m.group, 0) + 1
        out = []
        for r, m in self.model.items():
            if m.status != "queued":
                continue
            if m.group is not None and (
                m.group in self.paused
                or (self.group_limit is not None and running.get(m.group, 0) >= self.group_limit)
            ):
                continue
            out.append((m.priority, r))
        return sorted(out, key=lambda x: -x[0])

    def _group_room(self) -> int:
        """Tasks the groups' limits let start now, ungrouped ones included."""
        running: dict[str | None, int] = {}
        for m in self.model.values():
            if m.status == "running":
                running[m.group] = running.get(m.group, 0) + 1
        room = 0
        for group in {m.group for m in self.model.values()}:
            n = sum(1 for m in self.model.values() if m.status == "queued" and m.group == group)
            if group is not None:
                if group in self.paused:
                    n = 0
                elif self.group_limit is not None:
                    n = min(n, max(0, self.group_limit - running.get(group, 0)))
            room += n
        return room

    @rule(count=st.integers(1, 4))
    def claim(self, count: int) -> None:
        _, got = self.run(
            self.scripts.claim(
                self.qk,
                consumer="w",
                count=count,
                events_maxlen=10_000,
                retention_ms=600_000,
                defaults=self.defaults,
            )
        )
        runnable = self._runnable()
        running = sum(1 for m in self.model.values() if m.status == "running")
        room = len(runnable) if self.limit is None else max(0, self.limit - running)
        # A limit is never exceeded, and never holds back a task it has room for; a group's
        # limit and its pause hold too (a claim starts none of such a group's tasks).
        assert {c.rand for c in got} <= {r for _, r in runnable}
        assert len(got) == min(count, self._group_room(), room)
        # Strict priority among ungrouped tasks: nothing claimed is below one left unclaimed
        # (a grouped task waits its group's turn).
        if got:
            lowest_claimed = min(c.priority for c in got)
            left = [
                p
                for p, r in runnable
                if r not in {c.rand for c in got} and self.model[r].group is None
            ]
            assert all(p <= lowest_claimed for p in left)
        for c in got:
            self._started(c)

    def _started(self, c: Claimed) -> None:
        m = self.model[c.rand]
        assert m.status == "queued"
        m.status = "running"
        m.attempts += 1
        assert c.attempt == m.attempts <= m.max_attempts
        m.held = Held(c.rand, c.priority, c.entry_id, c.lease)

    @rule(rand=tasks, outcome=st.sampled_from(["ok", "retry", "dead", "cancel"]))
    def finish(self, rand: str, outcome: str) -> None:
        m = self.model[rand]
        if m.held is None:
            return
        if outcome == "retry" and m.attempts >= m.max_attempts:
            outcome = "dead"  # a worker never asks for a retry past the attempt budget
        payload = "" if outcome in {"ok", "cancel"} else ERR
        extra = "0" if outcome == "retry" else ""
        (status,) = self.run(
            self.scripts.finish(
                self.qk,
                [Finish(m.held, outcome, payload, extra)],
                events_maxlen=10_000,
                result_retention_ms=600_000,
                retention_ms=600_000,
                dlq_enabled=True,
                dlq_maxlen=1000,
            )
        )
        expected = {"ok": "succeeded", "retry": "retrying", "dead": "dead", "cancel": "cancelled"}[
            outcome
        ]
        assert status == expected
        m.stale.append(m.held)
        m.finished = m.held
        m.held = None
        m.status = expected
        m.cancel_requested = False

    @rule(rand=tasks)
    def stale_finish_changes_nothing(self, rand: str) -> None:
        m = self.model[rand]
        if not m.stale:
            return
        before = self.run(self.redis.hgetall(self.qk.task(rand)))
        (status,) = self.run(
            self.scripts.finish(
                self.qk,
                [Finish(m.stale[-1], "ok")],
                events_maxlen=10_000,
                result_retention_ms=600_000,
                retention_ms=600_000,
                dlq_enabled=True,
                dlq_maxlen=1000,
            )
        )
        # The finish of the attempt last finished, sent again, gets the status its outcome
        # sets (``ok``: succeeded); any other stale finish is refused. Neither changes a thing.
        assert status == ("succeeded" if m.stale[-1] == m.finished else "stale")
        assert self.run(self.redis.hgetall(self.qk.task(rand))) == before

    @rule()
    def heartbeat(self) -> None:
        held = [m.held for m in self.model.values() if m.held is not None]
        lost, cancel = self.run(self.scripts.extend_lease(self.qk, "w", held))
        assert lost == []
        assert set(cancel) == {
            r for r, m in self.model.items() if m.held is not None and m.cancel_requested
        }

    @rule()
    def hand_back(self) -> None:
        held = [m.held for m in self.model.values() if m.held is not None]
        released = self.run(
            self.scripts.release(self.qk, held, events_maxlen=10_000, reason="drain")
        )
        assert sorted(released) == sorted(h.rand for h in held)
        for h in held:
            m = self.model[h.rand]
            m.status, m.attempts = "queued", m.attempts - 1
            m.stale.append(h)
            m.held = None

    @rule()
    def every_worker_dies(self) -> None:
        result = self.run(
            self.scripts.reclaim(
                self.qk,
                consumer="reaper",
                min_idle_ms=0,
                budget=1000,
                events_maxlen=10_000,
                retention_ms=600_000,
                dlq_enabled=True,
                dlq_maxlen=1000,
                cursors=["0-0"] * 10,
            )
        )
        requeued = buried = 0
        for m in self.model.values():
            if m.held is None:
                continue
            m.stale.append(m.held)
            m.held = None
            if m.attempts >= m.max_attempts:
                m.status = "dead"
                buried += 1
            else:
                m.status = "queued"
                requeued += 1
        assert (result.requeued, result.buried, result.lost) == (requeued, buried, 0)

    @rule()
    def promote(self) -> None:
        waiting = [r for r, m in self.model.items() if m.status in {"scheduled", "retrying"}]
        promoted = 0
        for _ in range(200):  # due within a few ms: poll with a deadline
            n, _ = self.run(
                self.scripts.promote(
                    self.qk, epoch=1, limit=100, events_maxlen=10_000, retention_ms=600_000
                )
            )
            promoted += n
            if promoted == len(waiting):
                break
            self.run(asyncio.sleep(0.001))
        assert promoted == len(waiting)
        for r in waiting:
            self.model[r].status = "queued"

    @rule(rand=tasks)
    def cancel(self, rand: str) -> None:
        m = self.model[rand]
        outcome, status = self.run(
            self.scripts.cancel(
                self.qk, rand, events_maxlen=10_000, retention_ms=600_000, channel="dtq:cancel"
            )
        )
        if m.status in WAITING:
            assert (outcome, status) == ("cancelled", "cancelled")
            m.status = "cancelled"
        elif m.status == "running":
            assert outcome == "requested"
            m.cancel_requested = True
        else:
            assert (outcome, status) == ("final", m.status)

    @rule(rand=tasks)
    def requeue(self, rand: str) -> None:
        m = self.model[rand]
        (status,) = self.run(
            self.scripts.requeue(self.qk, [rand], events_maxlen=10_000, retention_ms=600_000)
        )
        if m.status == "dead":
            assert status == "requeued"
            m.status, m.attempts = "queued", 0
        else:
            assert status == m.status

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def every_task_is_where_its_status_says(self) -> None:
        if not self.model:
            return

        async def places() -> tuple[set[str], set[str], set[str], dict[str, str]]:
            pending: set[str] = set()
            undelivered: set[str] = set()
            for stream in self.qk.streams:
                groups = await self.redis.xinfo_groups(stream)
                last = groups[0]["last-delivered-id"] if groups else "0-0"
                for eid, fields in await self.redis.xrange(stream):
                    if _after(eid, last):
                        undelivered.add(fields["t"])
                for p in await self.redis.xpending_range(stream, "workers", "-", "+", 1000):
                    entry = await self.redis.xrange(stream, p["message_id"], p["message_id"])
                    pending.add(entry[0][1]["t"])
            delayed = set(await self.redis.zrange(self.qk.delayed, 0, -1))
            statuses = {}
            for rand in self.model:
                statuses[rand] = await self.redis.hget(self.qk.task(rand), "st")
            return pending, undelivered, delayed, statuses

        pending, undelivered, delayed, statuses = self.run(places())
        for rand, m in self.model.items():
            assert statuses[rand] == m.status, (rand, statuses[rand], m.status)
            where = (rand in pending, rand in undelivered, rand in delayed)
            allowed = EXPECTED_PLACES[m.status]
            if m.group is not None and m.status == "queued":
                allowed = allowed | {(False, False, False)}  # waiting in its group
            assert where in allowed, (rand, m.status, where)

    @invariant()
    def each_group_holds_its_tasks(self) -> None:
        """A group's running set is its running tasks; its waiting set and its stream set
        together are its queued tasks (a cancelled one may linger in the stream set until a
        claim meets its entry); the count of tasks waiting in groups is the sets' sizes."""
        waiting_total = 0
        for group in ("a", "b"):
            g = self.qk.group(group)
            waiting = set(self.run(self.redis.zrange(f"{g}:w", 0, -1)))
            in_streams = set(self.run(self.redis.smembers(f"{g}:s")))
            running = set(self.run(self.redis.smembers(f"{g}:r")))
            mine = {r: m for r, m in self.model.items() if m.group == group}
            assert running == {r for r, m in mine.items() if m.status == "running"}
            queued = {r for r, m in mine.items() if m.status == "queued"}
            assert waiting | {r for r in in_streams if r in queued} == queued
            assert not waiting & in_streams
            assert all(mine[r].status in {"queued", "cancelled"} for r in in_streams)
            waiting_total += len(waiting)
        assert int(self.run(self.redis.get(self.qk.groups_waiting)) or 0) == waiting_total

    @invariant()
    def attempts_within_budget_and_records_bounded(self) -> None:
        for rand, m in self.model.items():
            h = self.run(self.redis.hmget(self.qk.task(rand), ["att", "max"]))
            assert int(h[0] or 0) == m.attempts <= m.max_attempts
            assert self.run(self.redis.pttl(self.qk.task(rand))) > 0


# (in the PEL, undelivered in a stream, in the delayed set) allowed for each status. A cancelled
# queued task keeps its undelivered entry until a claim drops it (deleting it would make the
# group's lag, the queue depth, unknown).
EXPECTED_PLACES: dict[str, set[tuple[bool, bool, bool]]] = {
    "running": {(True, False, False)},
    "queued": {(False, True, False)},
    "scheduled": {(False, False, True)},
    "retrying": {(False, False, True)},
    "cancelled": {(False, False, False), (False, True, False)},
    "succeeded": {(False, False, False)},
    "dead": {(False, False, False)},
    "failed": {(False, False, False)},
    "expired": {(False, False, False)},
}


def _after(eid: str, last: str) -> bool:
    a, _, b = eid.partition("-")
    c, _, d = last.partition("-")
    return (int(a), int(b)) > (int(c), int(d))


@pytest.mark.timeout(600)
def test_lifecycle_state_machine(tmp_path: Path) -> None:
    # A server of its own, without persistence: thousands of short runs, each flushing it.
    server = RedisServer(tmp_path / "redis", appendonly=False)
    server.start()
    Lifecycle.url = server.url
    try:
        _run_machine()
    finally:
        server.stop()


def _run_machine() -> None:
    run_state_machine_as_test(
        Lifecycle,
        settings=settings(
            max_examples=120,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
