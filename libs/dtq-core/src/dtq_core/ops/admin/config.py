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

import math
import re
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

MAX_DEPTH_CAP = 1_000_000_000
MAX_CONCURRENCY = 100_000
MAX_RATE_PER_S = 1_000_000.0
MAX_BURST = 100_000
_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
RATE_PATTERN = r"^([0-9]{1,9}(?:\.[0-9]{1,6})?)/([smhd])$(?!\n)"
"""A rate: a number of tasks, ``/`` and a period (second, minute, hour, day)."""
_RATE_RE = re.compile(RATE_PATTERN)


class Unset:
    """A setting not given: left as Redis has it (``None`` clears one)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


class QueueConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's configuration as stored in Redis (``None``: not set)."""

    partitions: int = 1
    """Partitions the queue is split into (docs/scaling.md, "Partitioned queues")."""
    max_depth: int | None = None
    """Waiting tasks (delayed included) the queue admits; ``None``: DTQ_MAX_QUEUE_DEPTH."""
    rate: str | None = None
    """Tasks started per period across every worker, ``<n>/<s|m|h|d>`` (``100/s``)."""
    burst: int | None = None
    """Starts the rate lets through at once after a quiet time (default: a tenth of a second's
    worth, at least 1)."""
    concurrency: int | None = None
    """Tasks of the queue running at once across every worker."""


def parse_rate(value: object) -> float:
    """Tasks per second of a rate ``<n>/<s|m|h|d>``.

    Raises:
        ValidationError: not a rate, 0, or above MAX_RATE_PER_S.
    """
    match = _RATE_RE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValidationError(
            f"rate must look like 100/s, 6000/m, 10/h or 500/d, got {value!r}", field="rate"
        )
    per_s = float(match.group(1)) / _PERIODS[match.group(2)]
    if not 0 < per_s <= MAX_RATE_PER_S:
        raise ValidationError(
            f"rate must be above 0 and at most {MAX_RATE_PER_S:.0f}/s, got {value!r}",
            field="rate",
        )
    return per_s


def _bounded(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(
            f"{field} must be an integer from {low} to {high}, got {value!r}", field=field
        )
    return value


def default_burst(per_s: float) -> int:
    """A tenth of a second's worth of starts, at least 1."""
    return max(1, math.ceil(per_s / 10))


def checked(
    current: QueueConfig, *, max_depth: Any, rate: Any, burst: Any, concurrency: Any
) -> QueueConfig:
    """``current`` with the given settings (UNSET: kept, None: cleared), each checked.

    Raises:
        ValidationError: a value out of range; nothing is written.
    """
    changes: dict[str, Any] = {}
    if max_depth is not UNSET:
        changes["max_depth"] = (
            None if max_depth is None else _bounded("max_depth", max_depth, 0, MAX_DEPTH_CAP)
        )
    if rate is not UNSET:
        if rate is not None:
            parse_rate(rate)
        changes["rate"] = rate
    if burst is not UNSET:
        changes["burst"] = None if burst is None else _bounded("burst", burst, 1, MAX_BURST)
    if concurrency is not UNSET:
        changes["concurrency"] = (
            None
            if concurrency is None
            else _bounded("concurrency", concurrency, 1, MAX_CONCURRENCY)
        )
    out = msgspec.structs.replace(current, **changes)
    if out.burst is not None and out.rate is None:
        raise ValidationError("burst needs a rate", field="burst")
    return out


def limit_fields(config: QueueConfig, partitions: int) -> dict[str, str]:
    """One partition's share of each limit, as its meta hash holds them (absent: none)."""
    out: dict[str, str] = {}
    if config.max_depth is not None:
        out[MetaField.LIMIT_DEPTH] = str(
            config.max_depth if config.max_depth == 0 else math.ceil(config.max_depth / partitions)
        )
    if config.concurrency is not None:
        out[MetaField.LIMIT_CONCURRENCY] = str(math.ceil(config.concurrency / partitions))
    if config.rate is not None:
        per_s = parse_rate(config.rate)
        burst = config.burst if config.burst is not None else default_burst(per_s)
        out[MetaField.LIMIT_INTERVAL] = str(math.ceil(1_000_000 * partitions / per_s))
        out[MetaField.LIMIT_BURST] = str(max(1, math.ceil(burst / partitions)))
    return out


CONFIG_FIELDS = (
    MetaField.CONFIG_DEPTH,
    MetaField.CONFIG_RATE,
    MetaField.CONFIG_BURST,
    MetaField.CONFIG_CONCURRENCY,
)
LIMIT_FIELDS = (
    MetaField.LIMIT_DEPTH,
    MetaField.LIMIT_CONCURRENCY,
    MetaField.LIMIT_INTERVAL,
    MetaField.LIMIT_BURST,
)


def config_from(partitions: int, values: list[str | None]) -> QueueConfig:
    """The configuration from partition 0's :data:`CONFIG_FIELDS` (in that order)."""
    depth, rate, burst, concurrency = values
    return QueueConfig(
        partitions=partitions,
        max_depth=int(depth) if depth is not None else None,
        rate=rate,
        burst=int(burst) if burst is not None else None,
        concurrency=int(concurrency) if concurrency is not None else None,
    )


def _detail(before: QueueConfig, after: QueueConfig) -> str:
    """What changed, for the audit entry: ``partitions=1->4 rate=None->100/s``."""
    fields = ("partitions", "max_depth", "rate", "burst", "concurrency")
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
            before, max_depth=max_depth, rate=rate, burst=burst, concurrency=concurrency
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
                    }
                    kept = {k: str(v) for k, v in asked.items() if v is not None}
                    if kept:
                        await pipe.hset(qk.meta, mapping=cast(Mapping[Any, Any], kept))
                await replication.execute_confirmed(self.redis, pipe, [qk.meta])
        if count > len(parts):
            await self.client.scripts.grow_partitions(parts[0], count)
        self.client.submitter.layouts.forget(queue)
        await self._audit("queue.configure", queue, actor, 0, detail=_detail(before, wanted))
        return wanted

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
