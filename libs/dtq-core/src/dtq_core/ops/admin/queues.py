"""Steering queues: create, delete, pause, resume and purge (``/queues/{q}``, ``dtq queue``).

Pause and resume are one write: the flag and its event are one transaction, with the audit
entry in it or, on a cluster, right after it (:func:`dtq_core.ops.audit.execute_audited`).
Purge runs in batches of :data:`~dtq_core.ops.admin.base.BATCH` tasks (so other clients never
stall) and delete is a script of its own; their audit entry follows the change.
"""

from __future__ import annotations

from dtq_core.errors import QueueNotEmptyError
from dtq_core.infra import replication
from dtq_core.infra.connection import answering
from dtq_core.ops import audit as audit_log
from dtq_core.ops.admin.base import BATCH, AdminPart, _check_actor
from dtq_core.protocol.events import queue_state_event
from dtq_core.protocol.fields import MetaField
from dtq_core.protocol.submit import check_name
from dtq_core.router import queue_limit


class QueueSteering(AdminPart):
    """Creates, deletes, pauses, resumes and purges queues."""

    @answering
    async def create_queue(self, name: str, *, actor: str = "cli") -> bool:
        """Register ``name`` in the queue registry, so that submits into it are accepted
        before a worker serving it has started.

        Returns:
            True when it was created, False when it existed already (nothing changed).

        Raises:
            InvalidNameError: ``name`` is not a valid queue name.
            QueueLimitError: the registry holds DTQ_MAX_QUEUES queues.
        """
        _check_actor(actor)
        check_name("queue", name)
        if await self.redis.sismember(self.keys.queues, name):
            return False
        limit = self.settings.queues.max_queues
        (ok,) = await self.client.scripts.register_queues(self.keys.queues, [name], limit)
        if not ok:
            raise queue_limit(name, limit)
        await self._audit("queue.create", name, actor, 0)
        return True

    @answering
    async def delete_queue(self, name: str, *, actor: str = "cli") -> None:
        """Delete an empty queue: its keys and its registry entry (records of finished tasks
        stay until their retention ends). A live worker serving it registers it again with
        its next heartbeat.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
            QueueNotEmptyError: it holds waiting, running, delayed or dead tasks (nothing
                was deleted).
        """
        _check_actor(actor)
        parts = await self._partitions(name)
        totals = [0, 0, 0, 0]
        # The partitions last, partition 0 (which holds the count) first to go would leave
        # partitions nobody finds: drop them from the last one down.
        for qk in reversed(parts):
            dropped, counts = await self.client.scripts.drop_queue(qk)
            if not dropped:
                totals = [t + n for t, n in zip(totals, counts, strict=True)]
        if any(totals):
            waiting, running, delayed, dead = totals
            held = [
                what
                for what, n in (
                    ("waiting", waiting),
                    (f"{running} running", running),
                    (f"{delayed} delayed", delayed),
                    (f"{dead} dead", dead),
                )
                if n
            ]
            raise QueueNotEmptyError(
                f"queue {name!r} is not empty ({', '.join(held)} tasks): purge it "
                "(DELETE /api/v1/queues/{q}/tasks) and its dead-letter queue, let running "
                "tasks finish, then delete it",
                queue=name,
            )
        for qk in parts[1:]:
            await self.client.scripts.unregister_queue(self.keys.queues, qk.queue)
        if len(parts) > 1:
            await self.redis.hdel(parts[0].meta, MetaField.PARTITIONS, MetaField.PARTITIONS_LOG)
        await self.client.scripts.unregister_queue(self.keys.queues, name)
        self.client.forget_queue(name)
        await self._audit("queue.delete", name, actor, 0)

    @answering
    async def pause(self, queue: str, *, actor: str = "cli") -> None:
        """Stop workers from starting tasks of ``queue``; running tasks finish.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        await self._set_paused(queue, paused=True, actor=actor)

    @answering
    async def resume(self, queue: str, *, actor: str = "cli") -> None:
        """Let workers start tasks of ``queue`` again.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        await self._set_paused(queue, paused=False, actor=actor)

    async def _set_paused(self, queue: str, *, paused: bool, actor: str) -> None:
        _check_actor(actor)
        parts = await self._partitions(queue)
        action = "queue.pause" if paused else "queue.resume"
        entry = (await self.stamp()).entry(action, queue=queue, actor=actor, count=0)
        # Each partition's flag and its event (both in the partition's slot) are one step;
        # partition 0 goes last, with the audit entry where the topology allows
        # (dtq_core.ops.audit): a growth copies partition 0's flag to the new partitions.
        for qk in reversed(parts):
            async with replication.pipeline(self.redis, transaction=True) as pipe:
                await pipe.hset(qk.meta, MetaField.PAUSED, "1" if paused else "0")
                await pipe.xadd(
                    qk.events,
                    queue_state_event(paused=paused, actor=actor),
                    maxlen=self.settings.queues.events_maxlen,
                    approximate=True,
                )
                if qk is parts[0]:
                    await audit_log.execute_audited(pipe, self.redis, self.keys.audit, entry)
                else:
                    await replication.execute_confirmed(self.redis, pipe, [qk.meta])
        audit_log.logged(entry)

    @answering
    async def purge(self, queue: str, *, actor: str = "cli") -> int:
        """Cancel every waiting task of ``queue`` (queued, scheduled, retrying).

        Running tasks are left to finish.

        Returns:
            The number of waiting entries removed.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`queue`.
        """
        _check_actor(actor)
        total = 0
        for qk in await self._partitions(queue):
            while True:
                seen, cancelled = await self.client.scripts.purge(
                    qk,
                    limit=BATCH,
                    events_maxlen=self.settings.queues.events_maxlen,
                    retention_ms=self.settings.tasks.retention_s * 1000,
                )
                if seen == 0:
                    break
                total += cancelled
        await self._audit("queue.purge", queue, actor, total)
        return total
