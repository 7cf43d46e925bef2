"""Reading back what happened, for fault tests: the one history checker.

A fault test hands :func:`check_history` the task ids whose submits were acknowledged and,
when its handlers record their executions, the side Redis they record into. The checker
reads Redis' final state (a ``SCAN`` of every key of the namespace, the records, the priority
streams with their pending entries, the delayed sets, the event streams) and reports:

- **lost**: an accepted task with no record, no retained terminal event and no completed
  execution. A record that is gone is not lost by itself: only a terminal transition gives a
  record a TTL shorter than the task retention (and only a dead task's record goes with its
  trimmed DLQ entry), so a record that expired during a test that ran shorter than the
  retention ended (``expired_after_end``) when a handler's completion or a retained terminal
  event says so;
- **dup_terminal**: a task with more than one terminal event among the retained events;
- **stuck**: an accepted task whose record is not terminal (after the test's deadline);
- **orphans**: work-stream entries that can never become an execution, beyond what the lazy
  trim leaves (docs/architecture.md): a pending entry whose task is terminal, missing or names
  another entry; an undelivered entry of a task that is not queued on it; a delayed member of
  a task that is neither scheduled nor retrying; and acked entries past one stream node per
  stream (``XTRIM MINID ~`` drops whole nodes only, so up to ``stream-node-max-entries``
  acked entries may wait for the next trim);
- **unbounded**: keys with no TTL that are not one of the documented bounded keys
  (:mod:`dtq_core.protocol.keys`), and records or idempotency keys without a TTL;
- **unexpected**: records and terminal events of tasks nobody was told were accepted;
- **executions** per task, from the handlers' side effects (``exec_start`` entries
  ``<task id>|<attempt>|<pid>|<time>`` in the side Redis, see :mod:`dtq_devtools.testing.app`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import redis.asyncio as aioredis

from dtq_core.infra.connection import RETRYABLE, StreamEntry
from dtq_core.messages import TERMINAL, TERMINAL_EVENTS, Event, expand_events
from dtq_core.names import make_task_id, split_task_id
from dtq_core.protocol.fields import TaskField
from dtq_core.protocol.keys import GROUP, Keys, QueueKeys

TERMINAL_STATUSES = frozenset(s.value for s in TERMINAL)

_BOUNDED_GLOBAL = (
    "queues",
    "workers",
    "leader:epoch",
    "schedules",
    "schedules:state",
    "schedules:last",
)
"""Global keys without a TTL that are bounded by what they hold (docs/architecture.md)."""
_BOUNDED_GLOBAL_STREAMS = ("events", "audit")
_QUEUE_KEY = re.compile(r"\{(?P<queue>[^}]+)\}:(?P<rest>.+)")
_BOUNDED_QUEUE = re.compile(r"p\d|delayed|dlq|events|meta|gq:(?:all|wait|set|due)|g:.+:[wsr]")
"""A group's sets hold its tasks (Redis drops an empty one); the gq: keys are counters and the
groups' settings (lua/_lib.lua, "Groups")."""
_WITH_TTL_QUEUE = re.compile(r"t:[0-9a-f]{32}|idem:[0-9a-f]+")


async def queue_events(redis: aioredis.Redis, qk: QueueKeys) -> list[Event]:
    """Every retained lifecycle event of a queue, in order."""
    out: list[Event] = []
    cursor = "-"
    while True:
        entries = cast(list[StreamEntry], await redis.xrange(qk.events, min=cursor, count=1000))
        if not entries:
            return out
        for eid, fields in entries:
            out.extend(expand_events(qk.queue, eid, fields))
        cursor = "(" + entries[-1][0]


@dataclass
class Check:
    """What :func:`check_history` found; ``figures()`` is the JSON the fault tests record."""

    accepted: int
    statuses: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    dup_terminal: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    unbounded: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    expired_after_end: int = 0
    acked_untrimmed: int = 0
    keys: int = 0
    executions: Counter[str] = field(default_factory=Counter)

    @property
    def dup_exec(self) -> int:
        """Executions beyond the first, summed over tasks (from the side effects)."""
        return sum(n - 1 for n in self.executions.values() if n > 1)

    def figures(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "statuses": dict(sorted(self.statuses.items())),
            "lost": len(self.lost),
            "dup_terminal": len(self.dup_terminal),
            "stuck": len(self.stuck),
            "orphans": len(self.orphans),
            "unbounded_keys": len(self.unbounded),
            "unexpected": len(self.unexpected),
            "expired_after_end": self.expired_after_end,
            "acked_untrimmed": self.acked_untrimmed,
            "keys": self.keys,
            "executions": sum(self.executions.values()),
            "dup_exec": self.dup_exec,
        }

    def problems(self, *, max_dup_exec: int = 0, allow_unexpected: bool = False) -> list[str]:
        """Every violation, each with a few examples; empty when the history is clean."""
        out = []
        named: list[tuple[str, list[str]]] = [
            ("lost", self.lost),
            ("duplicate terminal", self.dup_terminal),
            ("stuck", self.stuck),
            ("orphaned entries", self.orphans),
            ("keys without a bound", self.unbounded),
        ]
        if not allow_unexpected:
            named.append(("unexpected tasks", self.unexpected))
        for name, found in named:
            if found:
                out.append(f"{len(found)} {name}: {found[:5]}")
        if self.dup_exec > max_dup_exec:
            doubled = [t for t, n in self.executions.items() if n > 1][:5]
            out.append(f"{self.dup_exec} duplicate executions (at most {max_dup_exec}): {doubled}")
        return out

    def assert_clean(self, *, max_dup_exec: int = 0, allow_unexpected: bool = False) -> None:
        """lost = duplicate terminal = stuck = orphans = unbounded = 0, and duplicate
        executions within what was in flight when the fault hit (``max_dup_exec``)."""
        found = self.problems(max_dup_exec=max_dup_exec, allow_unexpected=allow_unexpected)
        assert not found, "; ".join(found)


async def unsettled(redis: aioredis.Redis, accepted: Iterable[str], ns: str = "dtq") -> int:
    """How many of the tasks have a record that is not terminal (one pipelined round trip).
    A task without a record is settled here: the checker says whether it ended (its record
    expired) or was lost."""
    statuses = await _record_statuses(redis, Keys(ns), list(accepted))
    return sum(1 for st in statuses if st is not None and st not in TERMINAL_STATUSES)


async def settle(
    redis: aioredis.Redis,
    accepted: Iterable[str],
    timeout: float,
    *,
    ns: str = "dtq",
    interval: float = 0.2,
) -> float:
    """Wait until no accepted task has a record that is not terminal, or ``timeout`` passes;
    returns the seconds waited. It does not raise: what is still not terminal is the
    checker's ``stuck``, reported with everything else it found."""
    ids = list(accepted)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if await unsettled(redis, ids, ns) == 0:
                break
        except RETRYABLE:
            pass  # the fault may still be on: ask again
        await asyncio.sleep(interval)
    return time.monotonic() - started


async def check_history(
    redis: aioredis.Redis,
    accepted: Iterable[str],
    *,
    side: aioredis.Redis | None = None,
    ns: str = "dtq",
    settled: Collection[str] = TERMINAL_STATUSES,
) -> Check:
    """Compare the accepted submits with Redis' final state (see the module docstring).

    ``settled`` names the statuses a task may end the test in (terminal ones by default; a
    test without workers expects ``queued``); any other status is ``stuck``."""
    keys = Keys(ns)
    ids = sorted(set(accepted))
    check = Check(accepted=len(ids))
    scanned = await _scan(redis, ns)
    check.keys = len(scanned)
    check.unbounded = _unbounded(scanned, ns)
    queues = _queues(scanned, ns) | {parts[0] for t in ids if (parts := split_task_id(t))}
    terminal_events: Counter[str] = Counter()
    for queue in sorted(queues):
        for event in await queue_events(redis, keys.queue(queue)):
            if event.type in TERMINAL_EVENTS and event.task_id:
                terminal_events[event.task_id] += 1
    check.dup_terminal = sorted(t for t, n in terminal_events.items() if n > 1)
    ended: set[str] = set()
    if side is not None:
        starts = cast(list[str], await side.lrange("exec_start", 0, -1))
        check.executions = Counter(s.split("|", 1)[0] for s in starts)
        ends = cast(list[str], await side.lrange("exec_end", 0, -1))
        ended = {s.split("|", 1)[0] for s in ends}
    statuses = await _record_statuses(redis, keys, ids)
    for task_id, st in zip(ids, statuses, strict=True):
        if st is None:
            if terminal_events[task_id] or task_id in ended:
                check.expired_after_end += 1
                check.statuses["expired_after_end"] += 1
            else:
                check.lost.append(task_id)
        else:
            check.statuses[st] += 1
            if st not in settled:
                check.stuck.append(f"{task_id} ({st})")
    known = set(ids)
    recorded = {
        make_task_id(m["queue"], m["rest"][2:])
        for m in (_QUEUE_KEY.match(k[len(ns) + 1 :]) for k in scanned)
        if m and m["rest"].startswith("t:")
    }
    check.unexpected = sorted((recorded | set(terminal_events)) - known)
    for queue in sorted(queues):
        acked, orphans = await _orphans(redis, keys.queue(queue))
        check.acked_untrimmed += acked
        check.orphans.extend(orphans)
    return check


async def _scan(redis: aioredis.Redis, ns: str) -> dict[str, int]:
    """Every key of the namespace with its PTTL (-1: no expiry)."""
    names = [k async for k in redis.scan_iter(match=f"{ns}:*", count=1000)]
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            await pipe.pttl(name)
        ttls = await pipe.execute()
    return {n: int(t) for n, t in zip(names, ttls, strict=True) if int(t) != -2}


def _unbounded(scanned: dict[str, int], ns: str) -> list[str]:
    out = []
    for name, ttl in sorted(scanned.items()):
        if ttl >= 0:
            continue
        local = name[len(ns) + 1 :]
        if local in _BOUNDED_GLOBAL or local in _BOUNDED_GLOBAL_STREAMS:
            continue
        m = _QUEUE_KEY.fullmatch(local)
        if m and _BOUNDED_QUEUE.fullmatch(m["rest"]):
            continue
        out.append(name)  # records, idem keys, worker hashes, the lease: all need a TTL
    return out


def _queues(scanned: dict[str, int], ns: str) -> set[str]:
    return {m["queue"] for k in scanned if (m := _QUEUE_KEY.match(k[len(ns) + 1 :]))}


async def _record_statuses(redis: aioredis.Redis, keys: Keys, ids: list[str]) -> list[str | None]:
    async with redis.pipeline(transaction=False) as pipe:
        for task_id in ids:
            queue, rand = split_task_id(task_id) or ("", "")
            await pipe.hget(keys.queue(queue).task(rand), TaskField.STATUS)
        return cast(list[str | None], await pipe.execute())


async def _orphans(redis: aioredis.Redis, qk: QueueKeys) -> tuple[int, list[str]]:
    """Acked entries left for the lazy trim, and the entries that are orphans."""
    acked_total, orphans = 0, []
    config = await redis.config_get("stream-node-max-entries")
    node = int(config.get("stream-node-max-entries") or 100)
    for stream in qk.streams:
        if await redis.exists(stream):
            acked, found = await _stream_orphans(redis, qk, stream)
            if acked > node:
                found.append(f"{stream}: {acked} acked entries left (one node holds {node})")
            acked_total += acked
            orphans.extend(found)
    for rand in cast(list[str], await redis.zrange(qk.delayed, 0, -1)):
        st = cast(str | None, await redis.hget(qk.task(rand), TaskField.STATUS))
        if st not in ("scheduled", "retrying"):
            orphans.append(f"{qk.delayed} {rand}: task is {st}")
    return acked_total, orphans


async def _stream_orphans(
    redis: aioredis.Redis, qk: QueueKeys, stream: str
) -> tuple[int, list[str]]:
    """One priority stream: pending entries must be their running task's, undelivered ones
    their queued task's; the rest were delivered and acked and wait for the lazy trim."""
    groups: list[dict[str, Any]] = await redis.xinfo_groups(stream)
    group = next((g for g in groups if g["name"] == GROUP), None)
    last = _eid(group["last-delivered-id"]) if group else (0, 0)
    pel: list[dict[str, Any]] = await redis.xpending_range(stream, GROUP, "-", "+", 1_000_000)
    pending: set[str] = {p["message_id"] for p in pel}
    entries = cast(list[StreamEntry], await redis.xrange(stream))
    orphans = [
        f"{stream} {eid}: pending, its entry deleted"
        for eid in pending - {eid for eid, _ in entries}
    ]
    acked = 0
    for eid, fields in entries:
        rand = fields.get("t", "")
        st, rec_eid = cast(
            list[str | None],
            await redis.hmget(qk.task(rand), [TaskField.STATUS, TaskField.ENTRY_ID]),
        )
        if eid in pending:
            if st is None or st in TERMINAL_STATUSES or rec_eid != eid:
                orphans.append(f"{stream} {eid}: pending, task {rand} is {st}")
        elif _eid(eid) > last:
            if st != "queued" or rec_eid != eid:
                orphans.append(f"{stream} {eid}: undelivered, task {rand} is {st}")
        else:
            acked += 1
    return acked, orphans


def _eid(eid: str) -> tuple[int, int]:
    ms, _, seq = eid.partition("-")
    return int(ms), int(seq or 0)
