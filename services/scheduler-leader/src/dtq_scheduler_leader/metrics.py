"""The scheduler's Prometheus metrics, on a registry of their own (one per replica).

Labels stay bounded: queue names and schedule names, never task or worker ids.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class SchedulerMetrics:
    """Every metric the scheduler exports; ``registry`` is what ``serve_metrics`` serves."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.is_leader = Gauge(
            "dtq_scheduler_is_leader",
            "1 while this replica holds the leader lease, else 0.",
            registry=self.registry,
        )
        self.leader_changes = Counter(
            "dtq_scheduler_leader_changes",
            "Times this replica became leader (summed over replicas: leaderships).",
            registry=self.registry,
        )
        self.promoted = Counter(
            "dtq_scheduler_promoted",
            "Delayed and retrying tasks moved into their priority streams.",
            ["queue"],
            registry=self.registry,
        )
        self.stale_leader = Counter(
            "dtq_scheduler_stale_leader",
            "Promotions refused because a newer leadership epoch had acted (this replica was "
            "deposed).",
            registry=self.registry,
        )
        self.schedule_fired = Counter(
            "dtq_schedule_fired",
            "Schedule ticks that created a task.",
            ["schedule"],
            registry=self.registry,
        )
        self.workers_stale = Counter(
            "dtq_workers_stale",
            "Workers removed from the registry because their heartbeat stopped.",
            registry=self.registry,
        )
        self.reconciled = Counter(
            "dtq_reconciled",
            "Tasks repaired because their stream entry had been deleted by hand (restored: "
            "queued again untouched; requeued or buried: the attempt counted as lost).",
            ["queue", "outcome"],
            registry=self.registry,
        )
