"""The transitions' test harness: one queue, its keys and scripts, short names for each
transition, and the invariants that hold at rest between them.

After every scenario of ``libs/dtq-core/tests/scripts`` the ``h`` fixture checks the
invariants of docs/failure-modes.md (E1) that hold at rest: every task hash and idempotency
key has a TTL; each task sits in the one place its status names (queued: an undelivered entry;
running: a pending entry; scheduled/retrying: the delayed set; terminal: none of them, with a
TTL no longer than its retention); and, from the fault tests' history checker, every key is
bounded and no stream entry or delayed member is an orphan.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest
import redis.asyncio as aioredis

from dtq_core.infra.connection import StreamEntry, server_ms
from dtq_core.infra.settings import Settings
from dtq_core.messages import TERMINAL, Event, StoredError, TaskError, TaskRequest, expand_events
from dtq_core.protocol.attempts import NO_RUN_TIMES, RunTimes
from dtq_core.protocol.fields import TaskField
from dtq_core.protocol.keys import Keys, QueueKeys
from dtq_core.protocol.outcomes import FinishOutcome, SubmitOutcome
from dtq_core.protocol.scripts import Claimed, Finish, Held, ReclaimResult, Scripts, task_defaults
from dtq_core.protocol.submit import new_rands, prepare
from dtq_devtools.testing.history import check_history

__all__ = ["Harness", "bury_dead", "err", "held", "idle_at_least", "idle_ms", "later_than"]


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
        self,
        *reqs: TaskRequest,
        max_depth: int = 0,
        idem_ttl_ms: int = 60_000,
        headers: tuple[str, ...] = (),
    ) -> list[tuple[str, str, str]]:
        """Submit ``reqs``; ``headers``: each task's headers (trace context), by position."""
        tasks = [
            prepare(r, self.s, rand, headers=headers[i] if i < len(headers) else "")
            for i, (r, rand) in enumerate(zip(reqs, new_rands(len(reqs)), strict=True))
        ]
        reply = await self.scripts.submit(
            self.qk,
            tasks,
            max_depth=max_depth,
            retention_ms=self.ret_ms,
            idem_ttl_ms=idem_ttl_ms,
            events_maxlen=self.ev,
        )
        return [tuple(reply[i : i + 3]) for i in range(0, len(reply), 3)]  # type: ignore[misc]

    async def new(self, **kw: Any) -> str:
        ((outcome, rand, _),) = await self.submit(self.req(**kw))
        assert outcome == SubmitOutcome.NEW
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
        self,
        *outcomes: Finish,
        dlq_enabled: bool = True,
        dlq_maxlen: int | None = None,
        run_times: RunTimes = NO_RUN_TIMES,
    ) -> list[str]:
        return await self.scripts.finish(
            self.qk,
            outcomes,
            events_maxlen=self.ev,
            result_retention_ms=self.result_ms,
            retention_ms=self.ret_ms,
            dlq_enabled=dlq_enabled,
            dlq_maxlen=self.s.queues.dlq_maxlen if dlq_maxlen is None else dlq_maxlen,
            run_times=run_times,
        )

    async def ok(self, *claimed: Claimed, result: str = '"ok"') -> list[str]:
        return await self.finish(*(Finish(held(c), FinishOutcome.OK, result, "") for c in claimed))

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
        return cast(dict[str, str], await self.r.hgetall(self.qk.task(rand)))

    async def status(self, rand: str) -> str | None:
        return cast(str | None, await self.r.hget(self.qk.task(rand), TaskField.STATUS))

    async def errors(self, rand: str) -> list[TaskError]:
        raw = cast(str | None, await self.r.hget(self.qk.task(rand), TaskField.ERRORS))
        return [e.view() for e in msgspec.json.decode(raw, type=list[StoredError])] if raw else []

    async def now_ms(self) -> int:
        return await server_ms(self.r)

    async def pending(self, pri: int) -> list[dict[str, Any]]:
        return await self.r.xpending_range(self.qk.streams[pri], "workers", "-", "+", 10_000)

    async def all_pending(self) -> list[dict[str, Any]]:
        return [p for pri in range(10) for p in await self.pending(pri)]

    async def entry_ids(self, pri: int) -> list[str]:
        return [
            eid for eid, _ in cast(list[StreamEntry], await self.r.xrange(self.qk.streams[pri]))
        ]

    async def group(self, pri: int) -> dict[str, Any]:
        (g,) = await self.r.xinfo_groups(self.qk.streams[pri])
        return g

    async def events(self) -> list[Event]:
        out: list[Event] = []
        for eid, fields in cast(list[StreamEntry], await self.r.xrange(self.qk.events)):
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
        h = cast(dict[str, str], await self.r.hgetall(key))
        st, rand = h[TaskField.STATUS], key.rsplit(":", 1)[1]
        prefix = key[: -len(f"t:{rand}")]
        stream = f"{prefix}p{h[TaskField.PRIORITY]}"
        in_delayed = await self.r.zscore(f"{prefix}delayed", rand) is not None
        eid = h.get(TaskField.ENTRY_ID) or ""
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


async def later_than(h: Harness, ms: int) -> bool:
    """Whether Redis's clock is past ``ms`` (with a millisecond to spare)."""
    return await h.now_ms() > ms + 1


async def bury_dead(h: Harness, n: int, maxlen: int) -> list[str]:
    """``n`` tasks, each claimed and finished dead with a DLQ of ``maxlen`` entries."""
    rands = []
    for _ in range(n):
        rands.append(await h.new())
        (c,) = await h.claim()
        finish = Finish(held(c), FinishOutcome.DEAD, err(), "")
        assert await h.finish(finish, dlq_maxlen=maxlen) == ["dead"]
    return rands


async def idle_ms(h: Harness, pri: int, eid: str) -> int:
    """How long the pending entry ``eid`` of priority ``pri`` has been idle."""
    (p,) = await h.r.xpending_range(h.qk.streams[pri], "workers", eid, eid, 1)
    return int(p["time_since_delivered"])


async def idle_at_least(h: Harness, c: Claimed, ms: int) -> bool:
    """Whether the claimed attempt's entry has been idle for ``ms`` or more."""
    return await idle_ms(h, c.priority, c.entry_id) >= ms
