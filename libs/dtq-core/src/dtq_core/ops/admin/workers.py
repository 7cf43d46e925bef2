"""The worker registry as ``GET /workers`` and ``dtq status`` show it.

Each worker process registers on its own (its leases, heartbeat and sweep are its own); the
processes of one ``dtq-worker --processes N`` are shown here as one worker, with a line per
process (:func:`dtq_core.protocol.workers.group_of`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import msgspec

from dtq_core.infra.connection import answering, server_ms
from dtq_core.messages import micros_to_datetime
from dtq_core.ops.admin.base import AdminPart
from dtq_core.protocol.workers import WorkerRecord, group_of

STALE_HEARTBEATS = 3
"""A worker whose heartbeat is older than this many intervals is shown as ``stale`` (the
same bound as its registry hash's TTL)."""


class ProcessInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One worker process of a worker, as ``GET /workers`` shows it."""

    id: str
    """Its registered id: the worker's, then ``/<slot>`` under a supervisor (``.<n>`` after
    its n-th restart)."""
    slot: int | None
    """Its number among the worker's processes (``None``: a lone worker process)."""
    pid: int | None
    state: str
    """``running``, ``draining``, or ``stale`` (heartbeat older than three intervals)."""
    concurrency: int
    in_flight: int
    processed: int
    failed: int
    restarts: int
    """How often the supervisor had restarted this slot before this process started."""
    handler_processes: int
    """Its processes for ``executor="process"`` handlers (0: none)."""
    started_at: datetime | None
    last_heartbeat: datetime
    heartbeat_age_s: float


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One worker of the registry, as ``GET /workers`` shows it: one ``dtq-worker``, all of
    its processes together (sums of theirs; ``processes`` has each)."""

    id: str
    host: str | None
    pid: int | None
    """The supervisor's process id under ``--processes N``, else the worker process's."""
    queues: list[str]
    concurrency: int
    """Handlers that may run at once, over its live processes."""
    in_flight: int
    processed: int
    failed: int
    started_at: datetime | None
    last_heartbeat: datetime
    heartbeat_age_s: float
    state: str
    """``running`` or ``draining`` as the worker reports it, or ``stale`` when its heartbeat
    is older than three heartbeat intervals (every process's, under a supervisor)."""
    version: str | None
    process_slots: int = 1
    """The worker processes it runs (``--processes``); fewer are listed while one restarts."""
    processes: list[ProcessInfo] = msgspec.field(default_factory=list)
    """Each of its worker processes, by slot (a stale one that a new one replaced, too)."""


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
        groups: dict[str, list[tuple[ProcessInfo, WorkerRecord]]] = {}
        for (worker_id, score), h in zip(members, hashes, strict=True):
            age = max(0.0, (now_ms - float(score)) / 1000)
            record = WorkerRecord.from_fields(h)
            group, slot = group_of(worker_id)
            process = ProcessInfo(
                id=worker_id,
                slot=slot,
                pid=record.pid or None,
                state="stale" if age > stale_after_s else record.state or "running",
                concurrency=record.concurrency,
                in_flight=record.inflight,
                processed=record.processed,
                failed=record.failed,
                restarts=record.restarts,
                handler_processes=record.pool,
                started_at=(
                    micros_to_datetime(str(record.started_at)) if record.started_at else None
                ),
                last_heartbeat=datetime.fromtimestamp(float(score) / 1000, tz=UTC),
                heartbeat_age_s=age,
            )
            groups.setdefault(group, []).append((process, record))
        return sorted((_worker(g, ps) for g, ps in groups.items()), key=lambda w: w.id)


def _worker(group: str, members: list[tuple[ProcessInfo, WorkerRecord]]) -> WorkerInfo:
    """One worker from its processes' records."""
    members.sort(key=lambda m: (m[0].slot or 0, m[1].started_at))
    procs = [p for p, _ in members]
    records = [r for _, r in members]
    live = [p for p in procs if p.state != "stale"]
    states = [p.state for p in live]
    state: str = next((s for s in ("draining", "running") if s in states), "")
    state = state or (states[0] if states else "stale")
    first = next((r for r in records if r.host), records[0])
    supervisor = next((r.supervisor for r in records if r.supervisor), 0)
    newest = max(procs, key=lambda p: p.last_heartbeat)
    starts = [p.started_at for p in procs if p.started_at is not None]
    return WorkerInfo(
        id=group,
        host=first.host or None,
        pid=supervisor or first.pid or None,
        queues=list(dict.fromkeys(q for r in records for q in r.queues)),
        concurrency=sum(p.concurrency for p in live),
        in_flight=sum(p.in_flight for p in live),
        processed=sum(p.processed for p in procs),
        failed=sum(p.failed for p in procs),
        started_at=min(starts) if starts else None,
        last_heartbeat=newest.last_heartbeat,
        heartbeat_age_s=newest.heartbeat_age_s,
        state=state,
        version=first.version or None,
        process_slots=max(r.slots for r in records),
        processes=procs,
    )
