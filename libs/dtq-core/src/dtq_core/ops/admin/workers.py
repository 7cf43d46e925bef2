"""The worker registry as ``GET /workers`` and ``dtq status`` show it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import msgspec

from dtq_core.infra.connection import answering, server_ms
from dtq_core.messages import micros_to_datetime
from dtq_core.ops.admin.base import AdminPart
from dtq_core.protocol.workers import WorkerRecord

STALE_HEARTBEATS = 3
"""A worker whose heartbeat is older than this many intervals is shown as ``stale`` (the
same bound as its registry hash's TTL)."""


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One worker process of the registry, as ``GET /workers`` shows it."""

    id: str
    host: str | None
    pid: int | None
    queues: list[str]
    concurrency: int
    in_flight: int
    processed: int
    failed: int
    started_at: datetime | None
    last_heartbeat: datetime
    heartbeat_age_s: float
    state: str
    """``running`` or ``draining`` as the worker reports it, or ``stale`` when its heartbeat
    is older than three heartbeat intervals."""
    version: str | None


class WorkerListing(AdminPart):
    """Lists the workers of the registry."""

    @answering
    async def workers(self) -> list[WorkerInfo]:
        """Every worker of the registry, sorted by id; ages come from Redis time."""
        members = cast(
            list[tuple[str, float]],
            await self.redis.zrange(self.keys.workers, 0, -1, withscores=True),
        )
        # The clock that stamped the heartbeats (on a cluster, the registry's master).
        now_ms = await server_ms(self.redis, self.keys.workers)
        if not members:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id, _ in members:
                await pipe.hgetall(self.keys.worker(worker_id))
            hashes = await pipe.execute()
        stale_after_s = STALE_HEARTBEATS * self.settings.worker.heartbeat_interval_s
        out: list[WorkerInfo] = []
        for (worker_id, score), h in zip(members, hashes, strict=True):
            age = max(0.0, (now_ms - float(score)) / 1000)
            record = WorkerRecord.from_fields(h)
            out.append(
                WorkerInfo(
                    id=worker_id,
                    host=record.host or None,
                    pid=record.pid or None,
                    queues=list(record.queues),
                    concurrency=record.concurrency,
                    in_flight=record.inflight,
                    processed=record.processed,
                    failed=record.failed,
                    started_at=(
                        micros_to_datetime(str(record.started_at)) if record.started_at else None
                    ),
                    last_heartbeat=datetime.fromtimestamp(float(score) / 1000, tz=UTC),
                    heartbeat_age_s=age,
                    state="stale" if age > stale_after_s else record.state or "running",
                    version=record.version or None,
                )
            )
        return sorted(out, key=lambda w: w.id)
