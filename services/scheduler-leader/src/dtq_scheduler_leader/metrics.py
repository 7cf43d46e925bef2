"""The scheduler's Prometheus metrics, on a registry of their own (one per replica).

Labels stay bounded: queue names, priorities, schedule names and worker states, never task or
worker ids.

The queue gauges (``dtq_queue_*``, ``dtq_workers_registered``) describe the whole deployment,
not this replica, so only the leader exports them: a sum over every scheduler's series counts
each queue once. A follower's ``/metrics`` has none of those series.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dtq_core.infra.metrics import service_registry
from dtq_core.ops.admin import QueueStats
from dtq_core.ops.admin.config import parse_rate

WORKER_STATES = ("running", "draining", "stale")
DUTIES = (
    "lease",
    "promoter",
    "schedules",
    "reaper",
    "reconciler",
    "queue_stats",
    "history",
    "workflows",
)


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """Every queue and the worker registry at one moment (monotonic ``taken``)."""

    queues: Sequence[QueueStats]
    workers: Tally[str] = field(default_factory=Tally)
    taken: float = field(default_factory=time.monotonic)


class QueueGauges(Collector):
    """The leader's view of every queue, exposed when scraped.

    The refresher replaces :attr:`snapshot` (one reference assignment, so the scrape thread
    never sees half of one). Nothing is exported while this replica does not lead, before the
    first refresh, or when the last refresh is older than ``max_age_s`` (Redis stopped
    answering): a frozen number would look like a healthy, idle queue.
    """

    def __init__(self) -> None:
        self.snapshot: QueueSnapshot | None = None
        self.max_age_s = 15.0
        self._leading: Callable[[], bool] = lambda: False

    def watch(self, leading: Callable[[], bool], max_age_s: float) -> None:
        """Export only while ``leading()``; drop snapshots older than ``max_age_s``."""
        self._leading = leading
        self.max_age_s = max_age_s

    def _families(self) -> dict[str, GaugeMetricFamily]:
        return {
            "depth": GaugeMetricFamily(
                "dtq_queue_depth",
                "Tasks ready to run, by queue and priority (0-9, 9 drains first)",
                labels=["queue", "priority"],
            ),
            "delayed": GaugeMetricFamily(
                "dtq_queue_delayed",
                "Scheduled tasks and retries waiting for their due time",
                labels=["queue"],
            ),
            "inflight": GaugeMetricFamily(
                "dtq_queue_inflight",
                "Tasks claimed by a worker and not finished (the consumer group's pending)",
                labels=["queue"],
            ),
            "dead": GaugeMetricFamily(
                "dtq_queue_dead", "Entries of the dead-letter queue", labels=["queue"]
            ),
            "oldest": GaugeMetricFamily(
                "dtq_queue_oldest_age_seconds",
                "Age of the oldest task ready to run, since it was queued (0: none waits)",
                labels=["queue"],
            ),
            "paused": GaugeMetricFamily(
                "dtq_queue_paused", "1 while the queue is paused, else 0", labels=["queue"]
            ),
            "runnable": GaugeMetricFamily(
                "dtq_queue_runnable",
                "Tasks that could start now: ready to run, less what a pause or the queue's "
                "concurrency limit holds back (what an autoscaler should follow)",
                labels=["queue"],
            ),
            "concurrency": GaugeMetricFamily(
                "dtq_queue_concurrency_limit",
                "The queue's concurrency limit, for queues that set one (docs/flow-control.md)",
                labels=["queue"],
            ),
            "rate": GaugeMetricFamily(
                "dtq_queue_rate_limit_per_second",
                "The queue's rate limit in starts per second, for queues that set one",
                labels=["queue"],
            ),
            "partitions": GaugeMetricFamily(
                "dtq_queue_partitions", "Partitions the queue is split into", labels=["queue"]
            ),
            "waiting": GaugeMetricFamily(
                "dtq_queue_waiting",
                "Tasks that have not started, by why they wait: ready (a worker may take them "
                "now), scheduled (delayed or retrying), queue_paused, queue_concurrency_full, "
                "group (waiting in their group for its turn, its limits or its pause)",
                labels=["queue", "reason"],
            ),
            "groups": GaugeMetricFamily(
                "dtq_queue_groups", "Groups of the queue that hold tasks", labels=["queue"]
            ),
            "group_concurrency": GaugeMetricFamily(
                "dtq_queue_group_concurrency_limit",
                "The queue's concurrency limit per group, for queues that set one",
                labels=["queue"],
            ),
            "workers": GaugeMetricFamily(
                "dtq_workers_registered",
                "Workers in the registry by state (running, draining; stale: no heartbeat for "
                "three intervals)",
                labels=["state"],
            ),
        }

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None or not self._leading():
            return
        if time.monotonic() - snap.taken > self.max_age_s:
            return
        f = self._families()
        for q in snap.queues:
            for priority, depth in q.depth_by_priority.items():
                f["depth"].add_metric([q.name, priority], depth)
            f["delayed"].add_metric([q.name], q.delayed)
            f["inflight"].add_metric([q.name], q.in_flight)
            f["dead"].add_metric([q.name], q.dead)
            f["oldest"].add_metric([q.name], q.oldest_waiting_age_s or 0.0)
            f["paused"].add_metric([q.name], 1 if q.paused else 0)
            f["runnable"].add_metric([q.name], runnable(q))
            f["partitions"].add_metric([q.name], q.partitions)
            for reason, count in waiting_by_reason(q).items():
                f["waiting"].add_metric([q.name, reason], count)
            f["groups"].add_metric([q.name], q.groups)
            if q.group_concurrency is not None:
                f["group_concurrency"].add_metric([q.name], q.group_concurrency)
            if q.concurrency is not None:
                f["concurrency"].add_metric([q.name], q.concurrency)
            if q.rate is not None:
                f["rate"].add_metric([q.name], parse_rate(q.rate))
        for state in WORKER_STATES:
            f["workers"].add_metric([state], snap.workers.get(state, 0))
        yield from f.values()

    def describe(self) -> Iterator[Metric]:
        yield from self._families().values()


def runnable(q: QueueStats) -> int:
    """Tasks of ``q`` that could start now: none while paused; at a concurrency limit, the
    room left under it."""
    if q.paused:
        return 0
    if q.concurrency is not None:
        return min(q.depth, max(0, q.concurrency - q.in_flight))
    return q.depth


WAITING_REASONS = ("ready", "scheduled", "queue_paused", "queue_concurrency_full", "group")


def waiting_by_reason(q: QueueStats) -> dict[str, int]:
    """Tasks of ``q`` that have not started, by the reason they wait (each task counted once;
    a rate limit holds tasks for a moment only, so they count as ready)."""
    ready = runnable(q)
    return {
        "ready": ready,
        "scheduled": q.delayed,
        "queue_paused": q.depth if q.paused else 0,
        "queue_concurrency_full": 0 if q.paused else q.depth - ready,
        "group": q.waiting_in_groups,
    }


class SchedulerMetrics:
    """Every metric the scheduler exports; ``registry`` is what ``serve_metrics`` serves."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or service_registry("dtq-scheduler", "dtq-scheduler-leader")
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
        self.leader_deposed = Counter(
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
        self.redis_errors = Counter(
            "dtq_scheduler_redis_errors",
            "Redis calls that failed, by duty (lease, promoter, schedules, reaper, reconciler, "
            "queue_stats, history, workflows).",
            ["duty"],
            registry=self.registry,
        )
        for duty in DUTIES:
            self.redis_errors.labels(duty)
        self.workflows = Counter(
            "dtq_workflows",
            "Workflow events the leader published, by event (started, succeeded, failed, "
            "cancelled); at least once each (docs/workflows.md).",
            ["event"],
            registry=self.registry,
        )
        for event in ("started", "succeeded", "failed", "cancelled"):
            self.workflows.labels(event)
        self.workflow_advance = Histogram(
            "dtq_workflow_advance_seconds",
            "From a workflow step's end (its outbox note) to its workflow advanced: the next "
            "steps submitted, the events published.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.queues = QueueGauges()
        self.registry.register(self.queues)
