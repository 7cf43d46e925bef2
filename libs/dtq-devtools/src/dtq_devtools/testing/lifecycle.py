"""Tasks moved through their lifecycle by hand: the claim and finish functions called as a
worker calls them, for tests that need running, retrying or dead tasks without a worker.

Shared by the suites of the operator features (admin, browse, CLI), which each need the same
few states set up the same way.
"""

from __future__ import annotations

from typing import cast

from dtq_core.client import Client
from dtq_core.infra.connection import server_ms
from dtq_core.messages import TaskStatus
from dtq_core.names import make_task_id
from dtq_core.protocol.outcomes import FinishOutcome
from dtq_core.protocol.scripts import Claimed, Finish, Held

__all__ = [
    "ERROR",
    "audit_entries",
    "claim",
    "finish",
    "make_dead",
    "redis_ms",
    "status",
]

ERROR = '{"attempt":1,"type":"ValueError","message":"boom"}'
"""The error of a failed attempt, as a worker reports it."""

CONSUMER = "w1"
EVENTS_MAXLEN = 1000
RETENTION_MS = 600_000
RESULT_RETENTION_MS = 60_000
DLQ_MAXLEN = 10_000


async def claim(client: Client, queue: str, count: int = 10) -> list[Claimed]:
    """Claim up to ``count`` tasks of ``queue`` as consumer ``w1`` (the queue is not paused)."""
    paused, got = await client.scripts.claim(
        client.queue_keys(queue),
        consumer=CONSUMER,
        count=count,
        events_maxlen=EVENTS_MAXLEN,
        retention_ms=RETENTION_MS,
    )
    assert not paused, f"queue {queue!r} is paused"
    return got


async def finish(
    client: Client,
    queue: str,
    claimed: list[Claimed],
    outcome: str,
    *,
    payload: str | None = None,
    extra: str | None = None,
) -> list[str]:
    """Finish each claimed attempt with ``outcome`` (``ok``, ``retry``, ``dead``, ``cancel``).

    Args:
        payload: the result or error JSON; by default :data:`ERROR` for ``dead`` and ``retry``,
            no result otherwise.
        extra: the outcome's extra value; by default a retry is due at once (delay ``0``).

    Returns:
        Each attempt's new status, as the finish function reports it.
    """
    if payload is None:
        payload = ERROR if outcome in {"dead", "retry"} else ""
    if extra is None:
        extra = "0" if outcome == "retry" else ""
    step = FinishOutcome(outcome)
    return await client.scripts.finish(
        client.queue_keys(queue),
        [
            Finish(Held(c.rand, c.priority, c.entry_id, c.lease), step, payload, extra)
            for c in claimed
        ],
        events_maxlen=EVENTS_MAXLEN,
        result_retention_ms=RESULT_RETENTION_MS,
        retention_ms=RETENTION_MS,
        dlq_enabled=True,
        dlq_maxlen=DLQ_MAXLEN,
    )  # fmt: skip


async def make_dead(client: Client, queue: str, n: int, task: str = "t.fail") -> list[str]:
    """``n`` dead tasks in ``queue`` (whose other tasks must not be queued), in death order."""
    handles = await client.enqueue_many([{"task": task, "queue": queue} for _ in range(n)])
    assert all(not isinstance(h, Exception) for h in handles)
    got = await claim(client, queue, n)
    assert len(got) == n
    assert set(await finish(client, queue, got, "dead")) == {"dead"}
    return [make_task_id(queue, c.rand) for c in got]


async def status(client: Client, task_id: str) -> TaskStatus | None:
    """The task's status now, or ``None`` when its record is gone."""
    record = await client.get(task_id)
    return None if record is None else record.status


async def redis_ms(client: Client) -> int:
    """Redis server time in ms."""
    return await server_ms(client.redis)


async def audit_entries(client: Client) -> list[dict[str, str]]:
    """Every entry of the audit stream, oldest first."""
    entries = await client.redis.xrange(client.keys.audit)
    return [fields for _, fields in cast(list[tuple[str, dict[str, str]]], entries)]
