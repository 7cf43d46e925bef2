"""The Lua state transitions, one typed async wrapper each (:class:`Scripts`).

The library itself (building it from ``lua/``, loading, pruning, calling) is
:mod:`dtq_core.protocol.library`; the attempt values the wrappers take and return are
:mod:`dtq_core.protocol.attempts`, and the outcomes they reply :mod:`dtq_core.protocol.outcomes`.
Those names are importable from here too, where the code that calls the transitions has always
found them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from dtq_core.protocol.attempts import (
    NO_RUN_TIMES,
    Claimed,
    Finish,
    Held,
    ReclaimResult,
    RunTimes,
    claimed_from_reply,
    task_defaults,
)
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.library import (
    SCRIPT_NAMES,
    FunctionCaller,
    Library,
    function_missing,
    library,
    load_library,
    prune_libraries,
)
from dtq_core.protocol.outcomes import (
    CancelOutcome,
    ClaimState,
    DropOutcome,
    LeaseMode,
    errors_by_code,
)
from dtq_core.protocol.submit import Prepared, extend_argv

__all__ = [
    "SCRIPT_NAMES",
    "Claimed",
    "Finish",
    "Held",
    "Library",
    "ReclaimResult",
    "RunTimes",
    "Scripts",
    "function_missing",
    "library",
    "load_library",
    "prune_libraries",
    "task_defaults",
]


def _flag(enabled: bool) -> str:
    """A boolean argument as the scripts read it."""
    return "1" if enabled else "0"


class Scripts(FunctionCaller):
    """Every transition, called on one Redis client."""

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
        state, _, started = await self.claim_limited(
            qk,
            consumer=consumer,
            count=count,
            events_maxlen=events_maxlen,
            retention_ms=retention_ms,
            defaults=defaults,
            adopt=adopt,
        )
        return state is ClaimState.PAUSED, started

    async def claim_limited(
        self,
        qk: QueueKeys,
        *,
        consumer: str,
        count: int,
        events_maxlen: int,
        retention_ms: int,
        defaults: str = '{"*": [10, 30000]}',
        adopt: Sequence[tuple[int, str, str]] = (),
    ) -> tuple[ClaimState, int, list[Claimed]]:
        """:meth:`claim`, with what the queue's limits said: ``(state, wait_ms, started)``
        (``wait_ms``: when a rate-limited queue may start the next task)."""
        args: list[Any] = [qk.task_prefix, consumer, count, events_maxlen, retention_ms, defaults]
        for pri, eid, rand in adopt:
            args += [pri, eid, rand]
        # The meta hash is read inside, named from the task prefix (see lua/claim.lua).
        reply = await self._call("claim", [*qk.streams, qk.events, qk.rate], args)
        return ClaimState(reply[0]), int(reply[2]), claimed_from_reply(reply[3:])

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
        run_times: RunTimes = NO_RUN_TIMES,
    ) -> list[str]:
        """Record outcomes; returns the new status per attempt, or
        :attr:`~dtq_core.protocol.outcomes.Fence.STALE` when fenced off. ``run_times``: those
        of the attempts ended (not cancelled), for the queue's per-minute history."""
        args: list[Any] = [
            qk.task_prefix,
            events_maxlen,
            result_retention_ms,
            retention_ms,
            _flag(dlq_enabled),
            dlq_maxlen,
            *run_times.args(),
        ]
        for f in outcomes:
            args += [*f.held.args(), f.outcome, f.payload, f.extra, f.children]
        keys = [*qk.streams, qk.delayed, qk.dlq, qk.events]
        return cast(list[str], await self._call("finish", keys, args))

    async def extend_lease(
        self, qk: QueueKeys, consumer: str, held: Sequence[Held]
    ) -> tuple[list[str], list[str]]:
        """Returns ``(lost, cancel_requested)`` rands."""
        args: list[Any] = [qk.task_prefix, consumer]
        for h in held:
            args += h.args()
        lost, cancel = await self._call("extend_lease", qk.streams, args)
        return list(lost), list(cancel)

    async def release(
        self, qk: QueueKeys, held: Sequence[Held], *, events_maxlen: int, reason: str
    ) -> list[str]:
        """Hand attempts back to the queue at once; returns the rands handed back."""
        args: list[Any] = [qk.task_prefix, events_maxlen, reason]
        for h in held:
            args += h.args()
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
        """Take back attempts idle for ``min_idle_ms`` (their worker stopped heartbeating)."""
        args = [
            qk.task_prefix,
            consumer,
            min_idle_ms,
            budget,
            events_maxlen,
            retention_ms,
            _flag(dlq_enabled),
            dlq_maxlen,
            *cursors,
        ]
        reply = await self._call("reclaim", [*qk.streams, qk.dlq, qk.events], args)
        return ReclaimResult(int(reply[0]), int(reply[1]), int(reply[2]), list(reply[3]))

    async def cancel(
        self, qk: QueueKeys, rand: str, *, events_maxlen: int, retention_ms: int, channel: str
    ) -> tuple[CancelOutcome, str]:
        """Cancel a task that has not finished; returns the outcome and the task's status."""
        keys = [qk.task(rand), qk.delayed, qk.events]
        reply = await self._call("cancel", keys, [rand, events_maxlen, retention_ms, channel])
        return CancelOutcome(reply[0]), reply[1]

    async def requeue(
        self, qk: QueueKeys, rands: Sequence[str], *, events_maxlen: int, retention_ms: int
    ) -> list[str]:
        """Run dead or failed tasks again; per rand
        :attr:`~dtq_core.protocol.outcomes.RequeueOutcome.REQUEUED` or its current status."""
        keys = [*qk.streams, qk.dlq, qk.events]
        args = [qk.task_prefix, events_maxlen, retention_ms, *rands]
        return cast(list[str], await self._call("requeue", keys, args))

    async def discard(self, qk: QueueKeys, rands: Sequence[str], *, events_maxlen: int) -> int:
        """Delete dead or failed tasks and their DLQ entries; returns how many."""
        args = [qk.task_prefix, events_maxlen, *rands]
        return int(await self._call("discard", [qk.dlq, qk.events], args))

    async def promote(
        self, qk: QueueKeys, *, epoch: int, limit: int, events_maxlen: int, retention_ms: int
    ) -> tuple[int, int]:
        """Returns ``(promoted, next_due_ms)`` (``-1`` when nothing is delayed).

        Raises:
            StaleLeaderError: a newer leadership epoch has acted on this queue (the reply's
                code is :attr:`~dtq_core.protocol.outcomes.ErrorCode.STALE_LEADER`).
        """
        keys = [*qk.streams, qk.delayed, qk.meta, qk.events]
        args = [qk.task_prefix, epoch, limit, events_maxlen, retention_ms]
        with errors_by_code(queue=qk.queue, epoch=epoch):
            reply = await self._call("promote", keys, args)
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
        """Record a running attempt's progress; False when its lease is gone."""
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
            _flag(dlq_enabled),
            dlq_maxlen,
            *rands,
        ]
        restored, requeued, buried = await self._call("reconcile", keys, args)
        return int(restored), int(requeued), int(buried)

    async def prune_consumers(self, qk: QueueKeys, *, min_idle_ms: int, only: str = "") -> int:
        """Delete the queue's consumers that hold no pending entry and have been idle at least
        ``min_idle_ms`` (``only``: just this consumer); returns how many."""
        return int(await self._call("prune_consumers", qk.streams, [min_idle_ms, only]))

    async def leader_lease(self, key: str, mode: LeaseMode | str, token: str, ttl_ms: int) -> bool:
        """Acquire, renew or release the leader lease; True when the caller holds (or
        released) it."""
        return bool(await self._call("leader_lease", [key], [LeaseMode(mode), token, ttl_ms]))

    async def heartbeat(self, key: str, worker_id: str) -> int:
        """Stamp a worker's liveness; returns the server time in ms."""
        return int(await self._call("heartbeat", [key], [worker_id]))

    async def stale_workers(self, key: str, age_ms: int) -> list[str]:
        """Remove the workers whose last heartbeat is older than ``age_ms``; returns their ids."""
        return cast(list[str], await self._call("stale_workers", [key], [age_ms]))

    async def register_queues(self, key: str, names: Sequence[str], limit: int) -> list[bool]:
        """Add ``names`` to the queue registry ``key`` while it holds fewer than ``limit``
        (0: no bound); one flag per name, False when the full registry refused it."""
        flags = await self._call("register_queues", [key], [limit, *names])
        return [bool(int(f)) for f in flags]

    async def unregister_queue(self, key: str, name: str) -> bool:
        """Remove a queue from the registry; True when it was registered."""
        return bool(await self._call("unregister_queue", [key], [name]))

    async def grow_partitions(self, qk: QueueKeys, count: int) -> tuple[int, int]:
        """Raise ``qk``'s partition count to ``count`` unless it is that high already;
        ``(count before, count after)``."""
        before, after = await self._call("grow_partitions", [qk.meta], [count])
        return int(before), int(after)

    async def group_set(
        self, qk: QueueKeys, group: str, *, paused: bool | None, weight: int | None
    ) -> list[int]:
        """Pause, resume or weigh one group of ``qk``'s queue (``None``: unchanged; a weight
        of 1 is the default) and let it refill; ``[paused, weight, waiting, queued, running]``."""
        flag = "" if paused is None else "1" if paused else "0"
        args = [qk.task_prefix, group, flag, "" if weight is None else weight]
        return [int(v) for v in await self._call("group_set", list(qk.streams), args)]

    async def wf_create(
        self, key: str, fields: Sequence[str | bytes], *, retention_ms: int, client: Any = None
    ) -> str:
        """Store a new workflow (:func:`dtq_core.protocol.workflows.encode`'s fields);
        ``created``, or ``exists`` and nothing written."""
        return cast(str, await self._call("wf_create", [key], [retention_ms, *fields], client))

    async def wf_advance(
        self, key: str, ended: Sequence[Any], *, retention_ms: int, client: Any = None
    ) -> Any:
        """Record ended steps (:func:`~dtq_core.protocol.workflows.advance_args`; none: a
        kick); read the reply with :func:`~dtq_core.protocol.workflows.read_advance`."""
        return await self._call("wf_advance", [key], [retention_ms, *ended], client)

    async def wf_queued(
        self,
        key: str,
        submitted: Sequence[tuple[int, str]],
        *,
        published: str,
        retention_ms: int,
        client: Any = None,
    ) -> list[str]:
        """Record submitted steps and published events; the task ids of steps cancelled
        meanwhile (to cancel), then, last, the events still to publish (``""``: none)."""
        args = [retention_ms, published, *(v for pair in submitted for v in pair)]
        return cast(list[str], await self._call("wf_queued", [key], args, client))

    async def wf_batch_add(
        self, key: str, definitions: Sequence[bytes], *, max_steps: int, retention_ms: int
    ) -> tuple[str, str]:
        """Add members to an open batch: ``("added", index of the first)``, or ``("sealed",
        "")``, ``("final", status)``, ``("full", steps)``, ``("not_found", "")``."""
        reply = await self._call("wf_batch_add", [key], [retention_ms, max_steps, *definitions])
        return str(reply[0]), str(reply[1]) if len(reply) > 1 else ""

    async def wf_batch_seal(self, key: str, *, retention_ms: int) -> tuple[str, str]:
        """Seal a batch: ``("sealed" | "already", status)`` or ``("not_found", "")``."""
        reply = await self._call("wf_batch_seal", [key], [retention_ms])
        return str(reply[0]), str(reply[1]) if len(reply) > 1 else ""

    async def wf_settle(self, pending_key: str, marks: Sequence[tuple[str, float]]) -> int:
        """Take workflows off the pending set unless marked again since ``marks`` were
        read."""
        args = [v for pair in marks for v in pair]
        return cast(int, await self._call("wf_settle", [pending_key], args))

    async def wf_cancel(self, key: str, *, retention_ms: int) -> tuple[str, str, list[str]]:
        """Cancel a running workflow: ``(outcome, status, task ids to cancel)``."""
        outcome, status, ids = await self._call("wf_cancel", [key], [retention_ms])
        return str(outcome), str(status), [str(i) for i in ids]

    async def history_depth(
        self, qk: QueueKeys, *, waiting: int, in_flight: int, delayed: int, client: Any = None
    ) -> int:
        """Note ``qk``'s depth in the current minute of its per-minute history
        (:mod:`dtq_core.protocol.history`). ``client`` may be a pipeline (one round trip for
        every queue)."""
        args = [qk.task_prefix, waiting, in_flight, delayed]
        return cast(int, await self._call("history_depth", [qk.meta], args, client))

    async def drop_queue(self, qk: QueueKeys) -> tuple[bool, list[int]]:
        """Delete an empty queue's keys; ``(False, [waiting, running, delayed, dead])`` and
        nothing deleted when it holds a task."""
        keys = [*qk.streams, qk.delayed, qk.dlq, qk.events]
        reply = await self._call("drop_queue", keys, [])
        return reply[0] == DropOutcome.DROPPED, [int(n) for n in reply[1:]] or [0, 0, 0, 0]
