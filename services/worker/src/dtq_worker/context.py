"""What every part of one worker process shares: its settings, its queues' keys, its consumer
name, its two Redis clients, the scripts and the metrics.

The parts (claimer, running set, finisher, heartbeat, reclaimer) receive this view instead of
the :class:`dtq_worker.worker.Worker`, so none of them can reach into another's state.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from dtq_core.infra.settings import Settings
from dtq_core.protocol.keys import Keys, QueueKeys
from dtq_core.protocol.scripts import Scripts
from dtq_core.protocol.workers import process_id
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
class Place:
    """Where a worker process stands under a supervisor (``dtq-worker --processes N``)."""

    group: str
    """The supervisor's registered id, ``<DTQ_WORKER_ID>:<6 random hex digits>``."""
    slot: int
    """0..slots-1."""
    slots: int
    restarts: int
    """How often the supervisor restarted this slot before this process."""
    supervisor: int
    """The supervisor's process id."""

    @property
    def consumer(self) -> str:
        """The id this process registers and reads its queues under."""
        return process_id(self.group, self.slot, self.restarts)


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
    served: tuple[str, ...]
    """The queues the worker was started for (a partitioned one by its name)."""
    consumer: str
    redis: aioredis.Redis
    blocking: aioredis.Redis
    scripts: Scripts
    metrics: WorkerMetrics
    by_name: dict[str, QueueKeys]
    """Every stored queue claimed from: the served queues and their partitions
    (:meth:`add_partition` adds one when a queue grows)."""

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
        served = tuple(dict.fromkeys(queues))
        return cls(
            settings=settings,
            keys=keys,
            served=served,
            consumer=consumer,
            redis=redis,
            blocking=blocking,
            scripts=Scripts(redis),
            metrics=metrics,
            by_name={q: keys.queue(q) for q in served},
        )

    @property
    def queues(self) -> tuple[QueueKeys, ...]:
        """The keys of every stored queue claimed from (partitions included)."""
        return tuple(self.by_name.values())

    @property
    def queue_names(self) -> list[str]:
        """The served queues (what the worker registers and its routes name)."""
        return list(self.served)

    def add_partition(self, name: str) -> QueueKeys:
        """Claim from the partition ``name`` too (a served queue grew)."""
        qk = self.by_name.get(name)
        if qk is None:
            qk = self.by_name[name] = self.keys.queue(name)
        return qk
