"""The Lua state transitions, loaded once per client and called through typed wrappers.

Each ``lua/<name>.lua`` is one transition. ``lua/_lib.lua`` holds helpers shared by all of
them; it is placed right after each script's ``#!lua`` line when the script is loaded. This
module is the only caller of EVALSHA (redis-py's ``Script`` reloads a script by itself after
NOSCRIPT, so a Redis restart or ``SCRIPT FLUSH`` is transparent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from dtq_core.errors import StaleLeaderError
from dtq_core.keys import QueueKeys

SCRIPT_NAMES = (
    "submit",
    "claim",
    "finish",
    "extend_lease",
    "release",
    "reclaim",
    "cancel",
    "requeue",
    "discard",
    "promote",
    "purge",
    "progress",
    "leader_lease",
    "heartbeat",
    "stale_workers",
    "reconcile",
)


@cache
def script_source(name: str) -> str:
    """The full text sent to Redis for ``name``: its shebang line, the helpers, its body."""
    folder = resources.files("dtq_core") / "lua"
    body = (folder / f"{name}.lua").read_text()
    lib = (folder / "_lib.lua").read_text()
    shebang, _, rest = body.partition("\n")
    if not shebang.startswith("#!lua"):
        raise ValueError(f"lua/{name}.lua must start with a #!lua line")
    return f"{shebang}\n{lib}\n{rest}"


@dataclass(frozen=True, slots=True)
class Claimed:
    """One attempt started by :func:`Scripts.claim`."""

    rand: str
    priority: int
    entry_id: str
    lease: str
    attempt: int
    max_attempts: int
    timeout_ms: int
    task: str
    args: str
    kwargs: str
    headers: str
    queued_at_us: int


@dataclass(frozen=True, slots=True)
class Held:
    """An attempt a worker holds: enough to extend, finish or release it."""

    rand: str
    priority: int
    entry_id: str
    lease: str


@dataclass(frozen=True, slots=True)
class Finish:
    """The outcome of one attempt, for :func:`Scripts.finish`."""

    held: Held
    outcome: str  # ok | retry | dead | cancel
    payload: str = ""
    extra: str = ""


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    requeued: int
    buried: int
    lost: int
    cursors: list[str]


def task_defaults(
    max_attempts: int, timeout_ms: int, tasks: Sequence[tuple[str, int | None, float | None]] = ()
) -> str:
    """The claim script's defaults argument: the settings' values, and each registered
    task's own ``(name, max_attempts, timeout_s)`` where it declares them."""
    table: dict[str, list[int]] = {"*": [max_attempts, timeout_ms]}
    for name, task_max, task_timeout in tasks:
        if task_max is not None or task_timeout is not None:
            table[name] = [task_max or 0, round(task_timeout * 1000) if task_timeout else 0]
    return msgspec.json.encode(table).decode()


class Scripts:
    """Every transition script, registered on one Redis client."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._s: dict[str, AsyncScript] = {
            name: redis.register_script(script_source(name)) for name in SCRIPT_NAMES
        }

    def _call(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Any],
        client: Any = None,
    ) -> Any:
        return self._s[name](keys=list(keys), args=list(args), client=client)

    async def submit(
        self,
        qk: QueueKeys,
        *,
        max_depth: int,
        retention_ms: int,
        idem_ttl_ms: int,
        events_maxlen: int,
        items: Sequence[Any],
        client: Any = None,
    ) -> list[str]:
        keys = [*qk.streams, qk.delayed, qk.meta, qk.events]
        args = [
            qk.task_prefix,
            qk.idem_prefix,
            max_depth,
            retention_ms,
            idem_ttl_ms,
            events_maxlen,
            *items,
        ]
        return cast(list[str], await self._call("submit", keys, args, client))

    async def submit_call(
        self, qk: QueueKeys, items: Sequence[Any], *, head: Sequence[Any], client: Any = None
    ) -> Any:
        """One submit call; ``client`` may be a pipeline (``enqueue_many`` across queues)."""
        keys = [*qk.streams, qk.delayed, qk.meta, qk.events]
        return await self._call(
            "submit", keys, [qk.task_prefix, qk.idem_prefix, *head, *items], client
        )

    async def claim(
        self,
        qk: QueueKeys,
        *,
        consumer: str,
        count: int,
        events_maxlen: int,
        retention_ms: int,
        defaults: str = '{"*": [10, 30000]}',
        adopt: Sequence[tuple[int, str, str]] = (),
    ) -> tuple[bool, list[Claimed]]:
        """Start up to ``count`` tasks; returns ``(paused, started)``.

        ``defaults`` is JSON ``{"*": [max_attempts, timeout_ms], "<task>": [...]}`` (see
        :func:`task_defaults`), resolving what a submit left to the task's defaults.
        """
        args: list[Any] = [qk.task_prefix, consumer, count, events_maxlen, retention_ms, defaults]
        for pri, eid, rand in adopt:
            args += [pri, eid, rand]
        reply = await self._call("claim", [*qk.streams, qk.meta, qk.events], args)
        if reply[0] == "paused":
            return True, []
        out: list[Claimed] = []
        flat = reply[2:]
        for i in range(0, len(flat), 12):
            out.append(
                Claimed(
                    rand=flat[i],
                    priority=int(flat[i + 1]),
                    entry_id=flat[i + 2],
                    lease=str(flat[i + 3]),
                    attempt=int(flat[i + 4]),
                    max_attempts=int(flat[i + 5]),
                    timeout_ms=int(flat[i + 6]),
                    task=flat[i + 7],
                    args=flat[i + 8],
                    kwargs=flat[i + 9],
                    headers=flat[i + 10],
                    queued_at_us=int(flat[i + 11]),
                )
            )
        return False, out

    async def finish(
        self,
        qk: QueueKeys,
        outcomes: Sequence[Finish],
        *,
        events_maxlen: int,
        result_retention_ms: int,
        retention_ms: int,
        dlq_enabled: bool,
        dlq_maxlen: int,
    ) -> list[str]:
        """Record outcomes; returns the new status per attempt, ``"stale"`` when fenced off."""
        args: list[Any] = [
            qk.task_prefix,
            events_maxlen,
            result_retention_ms,
            retention_ms,
            "1" if dlq_enabled else "0",
            dlq_maxlen,
        ]
        for f in outcomes:
            h = f.held
            args += [h.rand, h.priority, h.entry_id, h.lease, f.outcome, f.payload, f.extra]
        keys = [*qk.streams, qk.delayed, qk.dlq, qk.events]
        return cast(list[str], await self._call("finish", keys, args))

    async def extend_lease(
        self, qk: QueueKeys, consumer: str, held: Sequence[Held]
    ) -> tuple[list[str], list[str]]:
        """Returns ``(lost, cancel_requested)`` rands."""
        args: list[Any] = [qk.task_prefix, consumer]
        for h in held:
            args += [h.rand, h.priority, h.entry_id, h.lease]
        lost, cancel = await self._call("extend_lease", qk.streams, args)
        return list(lost), list(cancel)

    async def release(
        self, qk: QueueKeys, held: Sequence[Held], *, events_maxlen: int, reason: str
    ) -> list[str]:
        args: list[Any] = [qk.task_prefix, events_maxlen, reason]
        for h in held:
            args += [h.rand, h.priority, h.entry_id, h.lease]
        return cast(list[str], await self._call("release", [*qk.streams, qk.events], args))

    async def reclaim(
        self,
        qk: QueueKeys,
        *,
        consumer: str,
        min_idle_ms: int,
        budget: int,
        events_maxlen: int,
        retention_ms: int,
        dlq_enabled: bool,
        dlq_maxlen: int,
        cursors: Sequence[str],
    ) -> ReclaimResult:
        args = [
            qk.task_prefix,
            consumer,
            min_idle_ms,
            budget,
            events_maxlen,
            retention_ms,
            "1" if dlq_enabled else "0",
            dlq_maxlen,
            *cursors,
        ]
        reply = await self._call("reclaim", [*qk.streams, qk.dlq, qk.events], args)
        return ReclaimResult(int(reply[0]), int(reply[1]), int(reply[2]), list(reply[3]))

    async def cancel(
        self, qk: QueueKeys, rand: str, *, events_maxlen: int, retention_ms: int, channel: str
    ) -> tuple[str, str]:
        keys = [qk.task(rand), qk.delayed, qk.events]
        reply = await self._call("cancel", keys, [rand, events_maxlen, retention_ms, channel])
        return reply[0], reply[1]

    async def requeue(
        self, qk: QueueKeys, rands: Sequence[str], *, events_maxlen: int, retention_ms: int
    ) -> list[str]:
        keys = [*qk.streams, qk.dlq, qk.events]
        args = [qk.task_prefix, events_maxlen, retention_ms, *rands]
        return cast(list[str], await self._call("requeue", keys, args))

    async def discard(self, qk: QueueKeys, rands: Sequence[str], *, events_maxlen: int) -> int:
        args = [qk.task_prefix, events_maxlen, *rands]
        return int(await self._call("discard", [qk.dlq, qk.events], args))

    async def promote(
        self, qk: QueueKeys, *, epoch: int, limit: int, events_maxlen: int, retention_ms: int
    ) -> tuple[int, int]:
        """Returns ``(promoted, next_due_ms)`` (``-1`` when nothing is delayed).

        Raises:
            StaleLeaderError: a newer leadership epoch has acted on this queue.
        """
        keys = [*qk.streams, qk.delayed, qk.meta, qk.events]
        try:
            reply = await self._call(
                "promote", keys, [qk.task_prefix, epoch, limit, events_maxlen, retention_ms]
            )
        except Exception as exc:
            if "STALE_LEADER" in str(exc):
                raise StaleLeaderError(str(exc), queue=qk.queue, epoch=epoch) from exc
            raise
        return int(reply[0]), int(reply[1])

    async def purge(
        self, qk: QueueKeys, *, limit: int, events_maxlen: int, retention_ms: int
    ) -> tuple[int, int]:
        """One purge step: ``(entries read, tasks cancelled)``; call until nothing is read."""
        keys = [*qk.streams, qk.delayed, qk.events]
        args = [qk.task_prefix, limit, events_maxlen, retention_ms]
        seen, cancelled = await self._call("purge", keys, args)
        return int(seen), int(cancelled)

    async def progress(
        self, qk: QueueKeys, rand: str, lease: str, payload: str, *, events_maxlen: int
    ) -> bool:
        keys = [qk.task(rand), qk.events]
        return bool(await self._call("progress", keys, [lease, payload, events_maxlen, rand]))

    async def reconcile(
        self,
        qk: QueueKeys,
        rands: Sequence[str],
        *,
        events_maxlen: int,
        retention_ms: int,
        dlq_enabled: bool,
        dlq_maxlen: int,
    ) -> tuple[int, int, int]:
        """Repair tasks whose entry is gone: ``(restored, requeued, buried)``."""
        keys = [*qk.streams, qk.dlq, qk.events]
        args = [
            qk.task_prefix,
            events_maxlen,
            retention_ms,
            "1" if dlq_enabled else "0",
            dlq_maxlen,
            *rands,
        ]
        restored, requeued, buried = await self._call("reconcile", keys, args)
        return int(restored), int(requeued), int(buried)

    async def leader_lease(self, key: str, mode: str, token: str, ttl_ms: int) -> bool:
        return bool(await self._call("leader_lease", [key], [mode, token, ttl_ms]))

    async def heartbeat(self, key: str, worker_id: str) -> int:
        return int(await self._call("heartbeat", [key], [worker_id]))

    async def stale_workers(self, key: str, age_ms: int) -> list[str]:
        return cast(list[str], await self._call("stale_workers", [key], [age_ms]))
