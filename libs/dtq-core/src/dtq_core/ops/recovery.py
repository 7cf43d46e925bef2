"""Repair of tasks whose stream entries an operator deleted (failure modes F1 and B9,
docs/failure-modes.md).

Normal operation never needs this: every transition keeps a task and its entry together. But
an ``XTRIM ... MAXLEN`` or ``XDEL`` on a work stream removes entries under the tasks, and
neither the claim nor the reclaim script can reach a task without its entry. The scheduler
leader runs :func:`reconcile_queue` periodically; it costs a SCAN of the queue's task records
(on a cluster, of its master), nothing on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtq_core.client import Client
from dtq_core.infra.cluster import scan_slot
from dtq_core.infra.connection import answering

SCAN_COUNT = 500
BATCH = 100


@dataclass(frozen=True, slots=True)
class Reconciled:
    checked: int = 0
    restored: int = 0
    requeued: int = 0
    buried: int = 0

    def __add__(self, other: Reconciled) -> Reconciled:
        return Reconciled(
            self.checked + other.checked,
            self.restored + other.restored,
            self.requeued + other.requeued,
            self.buried + other.buried,
        )


@answering
async def reconcile_queue(client: Client, queue: str) -> Reconciled:
    """Check every task record of ``queue`` against its stream entry, repairing the lost."""
    qk = client.queue_keys(queue)
    s = client.settings
    total = Reconciled()
    batch: list[str] = []
    start = len(qk.task_prefix)

    async def flush() -> Reconciled:
        restored, requeued, buried = await client.scripts.reconcile(
            qk,
            batch,
            events_maxlen=s.queues.events_maxlen,
            retention_ms=s.tasks.retention_s * 1000,
            dlq_enabled=s.queues.dlq_enabled,
            dlq_maxlen=s.queues.dlq_maxlen,
        )
        return Reconciled(len(batch), restored, requeued, buried)

    records = scan_slot(client.redis, qk.meta, qk.task_prefix + "*", SCAN_COUNT)
    async for key in records:
        batch.append(str(key)[start:])
        if len(batch) >= BATCH:
            total += await flush()
            batch = []
    if batch:
        total += await flush()
    return total
