"""What every part of :class:`~dtq_core.ops.admin.Admin` shares: the SDK client and its
settings, the check that a queue is known, the actor check, the audit writer and the batch
size of the operations that run in many script calls."""

from __future__ import annotations

from typing import Any, cast

from dtq_core.client import Client
from dtq_core.errors import QueueNotFoundError, ValidationError
from dtq_core.ops.audit import AuditWriter, Stamp
from dtq_core.partitions import read_layouts
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.submit import check_name

BATCH = 100
"""Tasks per script call: about a millisecond of Redis time, so other clients never stall."""

_ACTOR_MAX = 128


Entries = list[tuple[str, dict[str, str]]]


def _entries(reply: Any) -> Entries:
    """Stream entries as the admin's clients decode them (``decode_responses=True``)."""
    return cast(Entries, reply or [])


class AdminPart:
    """One part of the admin API: the client it works through and the audit it writes.

    Args:
        client: the SDK client whose connection and settings are used.
        audit_writer: writes the audit entry of each change (shared by every part).
    """

    def __init__(self, client: Client, audit_writer: AuditWriter) -> None:
        self.client = client
        self.redis = client.redis
        self.settings = client.settings
        self.keys = client.keys
        self.audit_writer = audit_writer

    async def _known(self, name: str) -> QueueKeys:
        check_name("queue", name)
        if not await self.redis.sismember(self.keys.queues, name):
            raise QueueNotFoundError(
                f"queue {name!r} is not known: no worker serving it has started and no admin "
                "created it",
                queue=name,
            )
        return self.keys.queue(name)

    async def _partitions(self, name: str) -> list[QueueKeys]:
        """The keys of every partition of the known queue ``name``, partition 0 (the queue
        itself) first: one entry for a queue that is not partitioned.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`_known`.
        """
        qk = await self._known(name)
        (layout,) = await read_layouts(self.redis, self.keys, [name])
        return [qk, *(self.keys.queue(n) for n in layout.names(name)[1:])]

    async def _audit(
        self, action: str, queue: str, actor: str, count: int, detail: str | None = None
    ) -> None:
        await self.audit_writer.audit(action, queue=queue, actor=actor, count=count, detail=detail)

    async def stamp(self) -> Stamp:
        """See :meth:`AuditWriter.stamp`."""
        return await self.audit_writer.stamp()


def _check_actor(actor: str) -> None:
    if not actor or len(actor) > _ACTOR_MAX or not actor.isprintable():
        raise ValidationError(
            f"actor must be 1 to {_ACTOR_MAX} printable characters, got {actor!r}",
            field="actor",
        )
