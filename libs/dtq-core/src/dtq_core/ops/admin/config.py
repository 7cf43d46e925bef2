"""A queue's configuration, stored in Redis: ``GET``/``PUT /queues/{q}``, ``dtq queue
configure|show``, ``registry.queue(...)`` (docs/flow-control.md, docs/scaling.md).

Partition 0's meta hash holds what was asked (``cfg_*`` fields and the partition count);
every partition's meta holds its share of each limit (``lim_*``), which is what the claim and
submit functions read: a queue of N partitions gives each a concurrency of ceil(c / N), a rate
of r / N, and a depth of ceil(d / N). A change is written partition by partition, partition 0
last with the asked values; it applies to the next claim and submit (workers and producers read
nothing else for it), and goes to the audit stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import msgspec

from dtq_core.errors import QueueLimitError, ValidationError
from dtq_core.infra import replication
from dtq_core.infra.connection import answering
from dtq_core.names import partition_name
from dtq_core.ops.admin.base import AdminPart, _check_actor
from dtq_core.partitions import check_partitions
from dtq_core.protocol.fields import MetaField
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.queue_config import (
    CONFIG_FIELDS,
    LIMIT_FIELDS,
    MAX_BURST,
    MAX_CONCURRENCY,
    MAX_DEPTH_CAP,
    MAX_RATE_PER_S,
    RATE_PATTERN,
    SETTINGS,
    UNSET,
    QueueConfig,
    Unset,
    checked,
    config_from,
    default_burst,
    limit_fields,
    parse_rate,
)

__all__ = [
    "CONFIG_FIELDS",
    "LIMIT_FIELDS",
    "MAX_BURST",
    "MAX_CONCURRENCY",
    "MAX_DEPTH_CAP",
    "MAX_RATE_PER_S",
    "RATE_PATTERN",
    "SETTINGS",
    "UNSET",
    "QueueConfig",
    "QueueConfigurator",
    "Unset",
    "checked",
    "config_from",
    "default_burst",
    "limit_fields",
    "parse_rate",
]


def _detail(before: QueueConfig, after: QueueConfig) -> str:
    """What changed, for the audit entry: ``partitions=1->4 rate=None->100/s``."""
    fields = ("partitions", *SETTINGS)
    return " ".join(
        f"{f}={getattr(before, f)}->{getattr(after, f)}"
        for f in fields
        if getattr(before, f) != getattr(after, f)
    )


class QueueConfigurator(AdminPart):
    """Reads and changes queue configurations."""

    async def read_config(self, parts: list[QueueKeys]) -> QueueConfig:
        values = await self.redis.hmget(parts[0].meta, list(CONFIG_FIELDS))
        return config_from(len(parts), cast(list[str | None], values))

    @answering
    async def config(self, queue: str) -> QueueConfig:
        """The configuration of ``queue``.

        Raises:
            InvalidNameError, QueueNotFoundError: see :meth:`_known`.
        """
        return await self.read_config(await self._partitions(queue))

    @answering
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
        """Change ``queue``'s configuration; a setting not given stays as it is, ``None``
        clears one (see :class:`QueueConfig`).

        Args:
            partitions: 1 to :data:`~dtq_core.names.MAX_PARTITIONS`; it may only grow.

        Returns:
            The configuration now.

        Raises:
            ValidationError: a value out of range, or fewer partitions than the queue has
                (nothing changed).
            QueueLimitError: the queue registry has no room for the new partitions
                (nothing changed).
            InvalidNameError, QueueNotFoundError: see :meth:`_known`.
        """
        _check_actor(actor)
        parts = await self._partitions(queue)
        before = await self.read_config(parts)
        wanted = checked(
            before,
            max_depth=max_depth,
            rate=rate,
            burst=burst,
            concurrency=concurrency,
            group_concurrency=group_concurrency,
            group_rate=group_rate,
        )
        count = len(parts)
        if partitions is not None:
            check_partitions(partitions)
            if partitions < count:
                raise ValidationError(
                    f"partitions may only grow: queue {queue!r} has {count}, asked for "
                    f"{partitions} (a partition may hold tasks, and their ids name it)",
                    field="partitions",
                )
            count = partitions
        wanted = msgspec.structs.replace(wanted, partitions=count)
        if wanted == before:
            return before
        names = [partition_name(queue, k) for k in range(count)]
        if count > len(parts):
            await self._register(queue, names[len(parts) :], count)
        paused = await self.redis.hget(parts[0].meta, MetaField.PAUSED) == "1"
        limits = limit_fields(wanted, count)
        # Each partition's share first, partition 0 (with what was asked) last; a new
        # partition starts paused when the queue is.
        for name in reversed(names):
            qk = self.keys.queue(name)
            async with replication.pipeline(self.redis, transaction=True) as pipe:
                await pipe.hdel(qk.meta, *LIMIT_FIELDS)
                if limits:
                    await pipe.hset(qk.meta, mapping=cast(Mapping[Any, Any], limits))
                if paused and name not in {p.queue for p in parts}:
                    await pipe.hset(qk.meta, MetaField.PAUSED, "1")
                if name == queue:
                    await pipe.hdel(qk.meta, *CONFIG_FIELDS)
                    asked = {
                        MetaField.CONFIG_DEPTH: wanted.max_depth,
                        MetaField.CONFIG_RATE: wanted.rate,
                        MetaField.CONFIG_BURST: wanted.burst,
                        MetaField.CONFIG_CONCURRENCY: wanted.concurrency,
                        MetaField.CONFIG_GROUP_CONCURRENCY: wanted.group_concurrency,
                        MetaField.CONFIG_GROUP_RATE: wanted.group_rate,
                    }
                    kept = {k: str(v) for k, v in asked.items() if v is not None}
                    if kept:
                        await pipe.hset(qk.meta, mapping=cast(Mapping[Any, Any], kept))
                await replication.execute_confirmed(self.redis, pipe, [qk.meta])
        if count > len(parts):
            await self.client.scripts.grow_partitions(parts[0], count)
        if wanted.group_concurrency != before.group_concurrency:
            await self._refill_groups([self.keys.queue(n) for n in names])
        self.client.submitter.layouts.forget(queue)
        await self._audit("queue.configure", queue, actor, 0, detail=_detail(before, wanted))
        return wanted

    async def _refill_groups(self, parts: list[QueueKeys]) -> None:
        """Let every group refill under a changed group concurrency: a group at the old limit
        has no task in a stream, and nothing else would let it take the room a higher limit
        gives (``group_set`` changing nothing refills the group)."""
        for qk in parts:
            groups = cast(set[str], await self.redis.smembers(qk.groups))
            for group in sorted(groups):
                await self.client.scripts.group_set(qk, group, paused=None, weight=None)

    async def _register(self, queue: str, new: list[str], count: int) -> None:
        """Register the new partitions in the queue registry, or none of them.

        Registered first, so that whoever reads the new count finds every partition in the
        registry (the scheduler promotes and reclaims what the registry lists).
        """
        limit = self.settings.queues.max_queues
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in new:
                await pipe.sismember(self.keys.queues, name)
            known = {n for n, f in zip(new, await pipe.execute(), strict=True) if f}
        flags = await self.client.scripts.register_queues(self.keys.queues, new, limit)
        if all(flags):
            return
        for name, ok in zip(new, flags, strict=True):
            if ok and name not in known:
                await self.client.scripts.unregister_queue(self.keys.queues, name)
        raise QueueLimitError(
            f"queue {queue!r} cannot grow to {count} partitions: the queue "
            f"registry holds DTQ_MAX_QUEUES={limit} queues and each partition counts as one; "
            "delete unused queues or raise the limit",
            queue=queue,
            limit=limit,
        )
