"""The Lua state transitions: one Redis Functions library, called through typed wrappers.

Each ``lua/<name>.lua`` is one transition; ``lua/_lib.lua`` holds the helpers they share. The
library built from them is named after a hash of its text (``dtq_<hash>``), and so is every
function in it (``dtq_<hash>_claim``): two versions of dtq can run side by side during a rolling
upgrade, each calling its own code. Functions are part of Redis's dataset (persisted and
replicated), unlike the script cache; they still vanish when Redis restarts without
persistence, or on ``FUNCTION FLUSH``. A call that finds its function missing loads the library
(``FUNCTION LOAD``) and runs again, when the caller is allowed to load; under least-privilege
ACLs only ``dtq migrate`` loads it, and callers report :class:`LibraryMissingError` until then.

This module is the only caller of ``FCALL``; nothing in dtq sends ``EVAL`` or ``EVALSHA``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
import structlog
from redis.exceptions import NoPermissionError, ResponseError

from dtq_core.errors import LibraryMissingError, StaleLeaderError
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.submit import Prepared, extend_argv

log = structlog.get_logger()

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
    "prune_consumers",
    "register_queues",
    "unregister_queue",
    "drop_queue",
)

_SHEBANG = re.compile(r"^#!lua(?: flags=([a-z-]+(?:,[a-z-]+)*))?$")


@dataclass(frozen=True, slots=True)
class Library:
    """The function library sent to Redis by ``FUNCTION LOAD``."""

    name: str
    source: str
    functions: dict[str, str]  # transition -> function name

    @property
    def version_function(self) -> str:
        """A read-only function answering the library's name: ``/ready`` calls it."""
        return f"{self.name}_version"


@cache
def library() -> Library:
    """Build the library from ``lua/``: the helpers once, then each transition as a function
    with the flags its ``#!lua`` line declares (``allow-oom`` on every transition that frees or
    only moves memory; none on submit, so that under OOM a submit is refused whole)."""
    folder = resources.files("dtq_core.protocol") / "lua"
    helpers = (folder / "_lib.lua").read_text()
    bodies: list[tuple[str, list[str], str]] = []
    for name in SCRIPT_NAMES:
        shebang, _, body = (folder / f"{name}.lua").read_text().partition("\n")
        match = _SHEBANG.match(shebang)
        if match is None:
            raise ValueError(f"lua/{name}.lua must start with a #!lua line, not {shebang!r}")
        bodies.append((name, match.group(1).split(",") if match.group(1) else [], body))
    digest = hashlib.sha1(  # noqa: S324 - a version tag, not security
        "\0".join([helpers, *(f"{n}{f}{b}" for n, f, b in bodies)]).encode()
    ).hexdigest()[:12]
    lib = f"dtq_{digest}"
    parts = [f"#!lua name={lib}", helpers]
    functions: dict[str, str] = {}
    for name, flags, body in bodies:
        functions[name] = f"{lib}_{name}"
        flag_list = ", ".join(f"'{f}'" for f in flags)
        parts.append(f"local function {name}_fn(KEYS, ARGV)\nrcall = redis.call\n{body}\nend")
        parts.append(
            f"redis.register_function{{function_name='{lib}_{name}', "
            f"callback={name}_fn, flags={{{flag_list}}}}}"
        )
    parts.append(
        f"redis.register_function{{function_name='{lib}_version', "
        f"callback=function() return '{lib}' end, flags={{'no-writes', 'allow-stale'}}}}"
    )
    return Library(name=lib, source="\n".join(parts) + "\n", functions=functions)


def function_missing(exc: BaseException) -> bool:
    """Whether a Redis error says the function (so the library) is not loaded."""
    # Inside a pipeline, redis-py prefixes the message with the failing command.
    return isinstance(exc, ResponseError) and "Function not found" in str(exc)


async def load_library(redis: aioredis.Redis) -> str:
    """Load (or reload) this version's library; returns its name.

    Raises:
        LibraryMissingError: the caller's ACL user may not load functions.
    """
    lib = library()
    try:
        await redis.function_load(lib.source, replace=True)
    except NoPermissionError as exc:
        raise LibraryMissingError(
            f"Redis has no function library {lib.name} and this user may not load it: "
            "run `dtq migrate` as a user allowed FUNCTION LOAD",
            library=lib.name,
        ) from exc
    log.info("functions_loaded", library=lib.name)
    return lib.name


async def prune_libraries(redis: aioredis.Redis) -> list[str]:
    """Delete every other version's dtq library (after a rolling upgrade has finished)."""
    current = library().name
    pruned: list[str] = []
    for entry in await redis.function_list(library="dtq_*"):
        fields = dict(zip(entry[::2], entry[1::2], strict=True))
        name = fields.get("library_name", fields.get(b"library_name"))
        name = name.decode() if isinstance(name, bytes) else name
        if isinstance(name, str) and re.fullmatch(r"dtq_[0-9a-f]{12}", name) and name != current:
            await redis.function_delete(name)
            pruned.append(name)
    return pruned


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
    """Every transition, called on one Redis client."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self.library = library()
        self.reloads = 0

    async def _call(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Any],
        client: Any = None,
    ) -> Any:
        function = self.library.functions[name]
        if client is not None:  # a pipeline: its caller handles a missing library
            return client.fcall(function, len(keys), *keys, *args)
        try:
            return await self.redis.fcall(function, len(keys), *keys, *args)
        except ResponseError as exc:
            if not function_missing(exc):
                raise
        await self.reload()
        return await self.redis.fcall(function, len(keys), *keys, *args)

    async def reload(self) -> None:
        """Load the library after a call found it missing (a flushed or empty Redis)."""
        self.reloads += 1
        log.warning("functions_missing", library=self.library.name, reloads=self.reloads)
        await load_library(self.redis)

    async def ensure(self) -> str:
        """Make sure this version's library is loaded (load it when missing and allowed).

        Raises:
            LibraryMissingError: it is missing and this user may not load it.
        """
        try:
            return await self.version()
        except ResponseError as exc:
            if not function_missing(exc):
                raise
        await self.reload()
        return await self.version()

    async def version(self) -> str:
        """The loaded library's name; raises ``ResponseError`` when it is missing."""
        reply = await self.redis.fcall_ro(self.library.version_function, 0)
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    async def submit(
        self,
        qk: QueueKeys,
        tasks: Sequence[Prepared],
        *,
        max_depth: int,
        retention_ms: int,
        idem_ttl_ms: int,
        events_maxlen: int,
        client: Any = None,
    ) -> list[str]:
        """Admit ``tasks`` (prepared for ``qk``'s queue) in one call; the answer is read by
        :func:`~dtq_core.protocol.submit.read_reply`. ``client`` may be a pipeline (one call
        per queue, one round trip for all); the answer then comes from the pipeline."""
        keys = [*qk.streams, qk.delayed, qk.meta, qk.events]
        head = [qk.task_prefix, qk.idem_prefix, max_depth, retention_ms, idem_ttl_ms, events_maxlen]
        return cast(list[str], await self._call("submit", keys, extend_argv(head, tasks), client))

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
        # The meta hash is read inside, named from the task prefix (see lua/claim.lua).
        reply = await self._call("claim", [*qk.streams, qk.events], args)
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

    async def prune_consumers(self, qk: QueueKeys, *, min_idle_ms: int, only: str = "") -> int:
        """Delete the queue's consumers that hold no pending entry and have been idle at least
        ``min_idle_ms`` (``only``: just this consumer); returns how many."""
        return int(await self._call("prune_consumers", qk.streams, [min_idle_ms, only]))

    async def leader_lease(self, key: str, mode: str, token: str, ttl_ms: int) -> bool:
        return bool(await self._call("leader_lease", [key], [mode, token, ttl_ms]))

    async def heartbeat(self, key: str, worker_id: str) -> int:
        return int(await self._call("heartbeat", [key], [worker_id]))

    async def stale_workers(self, key: str, age_ms: int) -> list[str]:
        return cast(list[str], await self._call("stale_workers", [key], [age_ms]))

    async def register_queues(self, key: str, names: Sequence[str], limit: int) -> list[bool]:
        """Add ``names`` to the queue registry ``key`` while it holds fewer than ``limit``
        (0: no bound); one flag per name, False when the full registry refused it."""
        flags = await self._call("register_queues", [key], [limit, *names])
        return [bool(int(f)) for f in flags]

    async def unregister_queue(self, key: str, name: str) -> bool:
        return bool(await self._call("unregister_queue", [key], [name]))

    async def drop_queue(self, qk: QueueKeys) -> tuple[bool, list[int]]:
        """Delete an empty queue's keys; ``(False, [waiting, running, delayed, dead])`` and
        nothing deleted when it holds a task."""
        keys = [*qk.streams, qk.delayed, qk.dlq, qk.events]
        reply = await self._call("drop_queue", keys, [])
        return reply[0] == "dropped", [int(n) for n in reply[1:]] or [0, 0, 0, 0]
