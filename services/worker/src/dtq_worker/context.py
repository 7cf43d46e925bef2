"""What every part of one worker process shares: its settings, its queues' keys, its consumer
name, its two Redis clients, the scripts and the metrics.

The parts (claimer, running set, finisher, heartbeat, reclaimer) receive this view instead of
the :class:`dtq_worker.worker.Worker`, so none of them can reach into another's state.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from dtq_core.infra.settings import Settings
from dtq_core.protocol.keys import Keys, QueueKeys
from dtq_core.protocol.scripts import Scripts
from dtq_worker.metrics import WorkerMetrics


def consumer_name(worker_id: str) -> str:
    """The id a worker process registers and reads its queues under:
    ``<DTQ_WORKER_ID>:<6 random hex digits>`` (docs/operations.md states this format).

    The random part is drawn at every start (failure mode F7, docs/failure-modes.md): a
    restarted worker never shares a PEL with its former self, and two processes given the same
    ``DTQ_WORKER_ID`` never share one.
    """
    return f"{worker_id}:{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """One worker process's shared, unchanging view of Redis and its configuration.

    Attributes:
        redis: the pooled client every non-blocking call uses.
        blocking: the client of the calls that park (wake-up reads, the cancellation
            listener, reading back the worker's own pending entries), so they never hold a
            connection the claim or finish path waits for.
    """

    settings: Settings
    keys: Keys
    queues: tuple[QueueKeys, ...]
    consumer: str
    redis: aioredis.Redis
    blocking: aioredis.Redis
    scripts: Scripts
    metrics: WorkerMetrics
    by_name: Mapping[str, QueueKeys]

    @classmethod
    def create(
        cls,
        settings: Settings,
        queues: Sequence[str],
        *,
        consumer: str,
        redis: aioredis.Redis,
        blocking: aioredis.Redis,
        metrics: WorkerMetrics,
    ) -> WorkerContext:
        """The view of a worker serving ``queues`` (duplicates dropped, order kept)."""
        keys = Keys(settings.namespace)
        qks = tuple(keys.queue(q) for q in dict.fromkeys(queues))
        return cls(
            settings=settings,
            keys=keys,
            queues=qks,
            consumer=consumer,
            redis=redis,
            blocking=blocking,
            scripts=Scripts(redis),
            metrics=metrics,
            by_name={qk.queue: qk for qk in qks},
        )

    @property
    def queue_names(self) -> list[str]:
        return [qk.queue for qk in self.queues]
