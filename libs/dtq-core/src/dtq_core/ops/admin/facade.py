"""The admin API's one entry point: :class:`Admin` composes the parts and hands each call to
the part that owns it, so that the REST API, the CLI and the scheduler hold one object."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dtq_core.client import Client
from dtq_core.ops.admin.config import UNSET, QueueConfig, QueueConfigurator
from dtq_core.ops.admin.dlq import DeadLetters, DlqPage
from dtq_core.ops.admin.groups import GroupPage, GroupStats, GroupSteering
from dtq_core.ops.admin.history import HistoryRange, HistoryReader, QueueHistory
from dtq_core.ops.admin.queues import QueueSteering
from dtq_core.ops.admin.stats import QueueStats, QueueStatsReader
from dtq_core.ops.admin.workers import WorkerInfo, WorkerListing
from dtq_core.ops.audit import AuditWriter, Stamp


class Admin:
    """Operator operations on a dtq deployment, through an SDK :class:`Client`.

    Example::

        admin = Admin(client)
        for stats in await admin.queues():
            print(stats.name, stats.depth)
        await admin.pause("emails", actor="alice")
    """

    def __init__(
        self, client: Client, *, request_id: Callable[[], str | None] | None = None
    ) -> None:
        """Args:
        client: the SDK client whose connection and settings are used.
        request_id: returns the id of the request being served, written into every audit
            entry (the REST API passes its request id, so the audit and its logs join).
        """
        self.client = client
        self.redis = client.redis
        self.settings = client.settings
        self.keys = client.keys
        self.audit_writer = AuditWriter(client.redis, client.keys, request_id)
        self._stats = QueueStatsReader(client, self.audit_writer)
        self._queues = QueueSteering(client, self.audit_writer)
        self._config = QueueConfigurator(client, self.audit_writer)
        self._dlq = DeadLetters(client, self.audit_writer)
        self._workers = WorkerListing(client, self.audit_writer)
        self._groups = GroupSteering(client, self.audit_writer)
        self._history = HistoryReader(client, self.audit_writer, self._stats)

    async def queues(self) -> list[QueueStats]:
        """Statistics of every registered queue (:meth:`QueueStatsReader.queues`)."""
        return await self._stats.queues()

    async def queue(self, name: str) -> QueueStats:
        """Statistics of one queue (:meth:`QueueStatsReader.queue`)."""
        return await self._stats.queue(name)

    async def history(
        self, span: HistoryRange | str = HistoryRange.HOUR, queue: str | None = None
    ) -> QueueHistory:
        """Per-minute figures of one queue or of every queue (:meth:`HistoryReader.history`)."""
        return await self._history.history(span, queue)

    async def note_depths(self) -> int:
        """Note every stored queue's depth in its history (:meth:`HistoryReader.note_depths`)."""
        return await self._history.note_depths()

    async def create_queue(self, name: str, *, actor: str = "cli") -> bool:
        """Register a queue before its workers start (:meth:`QueueSteering.create_queue`)."""
        return await self._queues.create_queue(name, actor=actor)

    async def delete_queue(self, name: str, *, actor: str = "cli") -> None:
        """Delete an empty queue (:meth:`QueueSteering.delete_queue`)."""
        await self._queues.delete_queue(name, actor=actor)

    async def pause(self, queue: str, *, actor: str = "cli") -> None:
        """Stop workers from starting tasks of ``queue`` (:meth:`QueueSteering.pause`)."""
        await self._queues.pause(queue, actor=actor)

    async def resume(self, queue: str, *, actor: str = "cli") -> None:
        """Let workers start tasks of ``queue`` again (:meth:`QueueSteering.resume`)."""
        await self._queues.resume(queue, actor=actor)

    async def config(self, queue: str) -> QueueConfig:
        """The configuration of ``queue`` (:meth:`QueueConfigurator.config`)."""
        return await self._config.config(queue)

    async def configure(
        self,
        queue: str,
        *,
        partitions: int | None = None,
        max_depth: Any = UNSET,
        rate: Any = UNSET,
        burst: Any = UNSET,
        concurrency: Any = UNSET,
        group_concurrency: Any = UNSET,
        group_rate: Any = UNSET,
        actor: str = "cli",
    ) -> QueueConfig:
        """Change ``queue``'s configuration (:meth:`QueueConfigurator.configure`)."""
        return await self._config.configure(
            queue,
            partitions=partitions,
            max_depth=max_depth,
            rate=rate,
            burst=burst,
            concurrency=concurrency,
            group_concurrency=group_concurrency,
            group_rate=group_rate,
            actor=actor,
        )

    async def groups(self, queue: str, *, limit: int = 100, cursor: str | None = None) -> GroupPage:
        """A page of ``queue``'s groups (:meth:`GroupSteering.groups`)."""
        return await self._groups.groups(queue, limit=limit, cursor=cursor)

    async def group(self, queue: str, group: str) -> GroupStats:
        """One group of ``queue`` (:meth:`GroupSteering.group`)."""
        return await self._groups.group(queue, group)

    async def set_group(
        self,
        queue: str,
        group: str,
        *,
        paused: bool | None = None,
        weight: int | None = None,
        actor: str = "cli",
    ) -> GroupStats:
        """Pause, resume or weigh one group (:meth:`GroupSteering.set_group`)."""
        return await self._groups.set_group(queue, group, paused=paused, weight=weight, actor=actor)

    async def purge(self, queue: str, *, actor: str = "cli") -> int:
        """Cancel every waiting task of ``queue`` (:meth:`QueueSteering.purge`)."""
        return await self._queues.purge(queue, actor=actor)

    async def dlq_list(
        self, queue: str, *, limit: int = 50, cursor: str | None = None, task: str | None = None
    ) -> DlqPage:
        """A page of dead tasks, newest first (:meth:`DeadLetters.dlq_list`)."""
        return await self._dlq.dlq_list(queue, limit=limit, cursor=cursor, task=task)

    async def dlq_requeue(
        self,
        queue: str,
        ids: Sequence[str] | None = None,
        *,
        all: bool = False,
        task: str | None = None,
        actor: str = "cli",
    ) -> int:
        """Run dead tasks again (:meth:`DeadLetters.dlq_requeue`)."""
        return await self._dlq.dlq_requeue(queue, ids, all=all, task=task, actor=actor)

    async def dlq_discard(self, queue: str, ids: Sequence[str], *, actor: str = "cli") -> int:
        """Delete dead tasks and their DLQ entries (:meth:`DeadLetters.dlq_discard`)."""
        return await self._dlq.dlq_discard(queue, ids, actor=actor)

    async def dlq_purge(self, queue: str, *, actor: str = "cli") -> int:
        """Delete every dead task of ``queue`` (:meth:`DeadLetters.dlq_purge`)."""
        return await self._dlq.dlq_purge(queue, actor=actor)

    async def workers(self) -> list[WorkerInfo]:
        """Every worker of the registry (:meth:`WorkerListing.workers`)."""
        return await self._workers.workers()

    async def audit(
        self,
        action: str,
        *,
        queue: str,
        actor: str,
        count: int,
        detail: str | None = None,
    ) -> None:
        """Append one audit entry after a change (:meth:`AuditWriter.audit`)."""
        await self.audit_writer.audit(action, queue=queue, actor=actor, count=count, detail=detail)

    async def stamp(self) -> Stamp:
        """The stamp of entries written with their change (:meth:`AuditWriter.stamp`)."""
        return await self.audit_writer.stamp()
