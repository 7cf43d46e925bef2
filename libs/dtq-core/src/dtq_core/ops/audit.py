"""Audit entries: who changed what, written with the change itself.

An operator's change that is one write and its entry are one step where Redis allows it:
:func:`execute_audited` queues the entry in the change's transaction pipeline on one Redis
(standalone or the Sentinel-managed master), so Redis applies both or neither, and a crash, a
dropped connection or a refused write between two round trips cannot leave a change without
its entry (or an entry for a change that never happened).

Why a transaction and not a function: the audit stream ``dtq:audit`` is a global key, the
changes are on queue keys (``dtq:{q}:meta``, hash-tagged) or on the global schedules hash. A
function (or a script) must declare keys of one slot on a cluster; a MULTI/EXEC of single-key
commands keeps the rule that global keys are only used in single-key commands
(docs/architecture.md, "Redis data model").

Redis Cluster runs no transaction across two slots. There the change (its keys of one slot:
a queue's flag with its event, which carries the actor) is its own transaction and the entry
is written right after it (:func:`dtq_core.infra.transaction.execute_with`): a failure between
the two leaves the change made without its entry, and the caller gets the error.

Changes made by a transition function (cancel, retry) and batched ones (purges, requeues,
discards, many calls so Redis stays responsive) write their entry after the change on every
topology: a MULTI/EXEC cannot make the entry depend on the function's outcome (a refused
cancel would be audited), and a function cannot touch the global stream from the queue's slot.

Both ways write the same entry (:meth:`Stamp.entry`) with the same command (:func:`append`),
and log it the same way once it is written (:func:`logged`).

Entries are small and bounded: ``detail`` is cut at :data:`DETAIL_MAX` characters and the
stream at about :data:`AUDIT_MAXLEN` entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.client import Pipeline
from redis.typing import EncodableT, FieldT

from dtq_core.infra.cluster import time_of
from dtq_core.infra.connection import answering, time_us
from dtq_core.infra.transaction import Write, execute_with
from dtq_core.protocol.keys import Keys

log = structlog.get_logger()

AUDIT_MAXLEN = 100_000
"""Approximate cap of the audit stream (a few hundred bytes an entry at most: ~10-50 MB)."""

DETAIL_MAX = 512
"""Longest ``detail``: a schedule's arguments may be 256 KiB, its audit entry may not."""

Fields = dict[FieldT, EncodableT]


def bounded(detail: str) -> str:
    """``detail`` cut to :data:`DETAIL_MAX` characters, marked when cut."""
    if len(detail) <= DETAIL_MAX:
        return detail
    return detail[: DETAIL_MAX - 1] + "…"


@dataclass(frozen=True, slots=True)
class Stamp:
    """When (server time, microseconds) and for which request entries are written."""

    ts_us: int
    request_id: str | None = None

    def entry(
        self, action: str, *, queue: str, actor: str, count: int, detail: str | None = None
    ) -> Fields:
        """The fields of one entry: ``action``, ``queue``, ``actor``, ``count``, ``ts`` and,
        when known, ``request_id`` and ``detail``."""
        fields: Fields = {
            "action": action,
            "queue": queue,
            "actor": actor,
            "count": str(count),
            "ts": str(self.ts_us),
        }
        if self.request_id:
            fields["request_id"] = self.request_id
        if detail:
            fields["detail"] = bounded(detail)
        return fields


async def append(target: aioredis.Redis | Pipeline, key: str, fields: Fields) -> None:
    """Write one entry: the only ``XADD`` of the audit stream.

    Args:
        target: the pipeline the entry is queued on (:func:`execute_audited`), or the
            connection, for a change whose entry follows it (:meth:`AuditWriter.audit`).
        key: the audit stream (``Keys.audit``).
        fields: the entry (:meth:`Stamp.entry`).
    """
    await target.xadd(key, fields, maxlen=AUDIT_MAXLEN, approximate=True)


async def execute_audited(
    pipe: Pipeline,
    redis: aioredis.Redis,
    key: str,
    entry: Fields | None,
    *,
    then: Sequence[Write] = (),
) -> list[Any]:
    """Execute the change queued in the transaction ``pipe`` and write its audit entry: in
    the same transaction on one Redis, right after it on a cluster (see the module
    docstring). The one way a change that is one write gets its entry.

    Args:
        pipe: a transaction pipeline of ``redis`` holding the change (its keys of one slot).
        redis: the client ``pipe`` belongs to.
        key: the audit stream (``Keys.audit``).
        entry: the entry (:meth:`Stamp.entry`); ``None`` writes none (a change made by code,
            not by an operator).
        then: other companions of the change outside its slot, written like the entry and
            before it.

    Returns:
        The replies of the change's own commands.
    """
    writes = list(then)
    if entry is not None:
        writes.append(lambda target: append(target, key, entry))
    return await execute_with(pipe, redis, writes)


def logged(fields: Fields) -> None:
    """The log line of a written entry (after the transaction succeeded)."""
    text = {str(k): str(v) for k, v in fields.items()}
    log.info(
        "admin_action",
        action=text.get("action"),
        queue=text.get("queue"),
        actor=text.get("actor"),
        count=int(text.get("count", "0")),
        detail=text.get("detail"),
    )


class AuditWriter:
    """Writes the audit entries of changes whose entry follows the change, and stamps the
    entries of changes written with it (:func:`execute_audited`).

    Args:
        redis: the connection (``decode_responses=True``).
        keys: the namespace's keys (the entry goes to ``Keys.audit``).
        request_id: returns the id of the request being served, written into every audit
            entry (the REST API passes its request id, so the audit and its logs join).
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        request_id: Callable[[], str | None] | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self._request_id = request_id

    @answering
    async def audit(
        self,
        action: str,
        *,
        queue: str,
        actor: str,
        count: int,
        detail: str | None = None,
    ) -> None:
        """Append one entry to the audit stream (``Keys.audit``, server time) and log it.

        For changes that are many writes by nature (purges and requeues run in batches, so
        Redis stays responsive) and for callers whose change dtq-core makes in a script of
        its own (cancel, retry): the entry follows the change. A change that is one write
        goes with its entry instead (:meth:`stamp`, :func:`execute_audited`).
        """
        entry = (await self.stamp()).entry(
            action, queue=queue, actor=actor, count=count, detail=detail
        )
        await append(self.redis, self.keys.audit, entry)
        logged(entry)

    @answering
    async def stamp(self) -> Stamp:
        """The server's time now and the request being served, for the entries of a change
        written with it (:func:`execute_audited`)."""
        now = time_us(await time_of(self.redis))
        rid = self._request_id() if self._request_id else None
        return Stamp(now, rid or None)
