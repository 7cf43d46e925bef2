"""The worker's Prometheus metrics (own registry; served on DTQ_WORKER_METRICS_PORT).

Per-task metrics sit on the hot path (tens of thousands of tasks a second), so counters are
added up per finish batch, gauges are read when scraped, and the two per-task histograms are
:class:`dtq_core.infra.metrics.FastHistogram` bucket arrays (``prometheus_client``'s ``observe``
takes a lock and costs about 3 µs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import Counter, Gauge

from dtq_core.infra.metrics import FastHistogram, service_registry

REDIS_LOOPS = ("claim", "wake", "finish", "heartbeat", "reaper", "cancel_listener")
REPLACED_REASONS = ("timeout", "cancel", "lease_lost", "drain", "died")


class WorkerMetrics:
    """Every metric a worker exports. Labels are queue, task and status: never ids."""

    def __init__(self) -> None:
        self.registry = service_registry("dtq-worker", "dtq-worker")
        r = self.registry
        self.tasks = Counter(
            "dtq_tasks_total",
            "Executions finished, by outcome (succeeded, retrying, dead, failed, cancelled, "
            "stale: the lease was gone when the outcome arrived)",
            ["queue", "task", "status"],
            registry=r,
        )
        self.duration = FastHistogram(
            "dtq_task_duration_seconds", "Handler run time", ("queue", "task")
        )
        self.wait = FastHistogram(
            "dtq_task_wait_seconds",
            "Time from queued to started (queued time is Redis time; start is this host's)",
            ("queue",),
        )
        r.register(self.duration)
        r.register(self.wait)
        self.inflight = Gauge("dtq_worker_inflight", "Handlers running now", registry=r)
        self.buffered = Gauge(
            "dtq_worker_prefetched", "Tasks claimed and waiting for a free slot", registry=r
        )
        self.concurrency = Gauge("dtq_worker_concurrency", "Configured concurrency", registry=r)
        self.claims = Counter("dtq_worker_claims_total", "Claim round trips", ["queue"], registry=r)
        self.limit_hits = Counter(
            "dtq_worker_limit_hits_total",
            "Claims a queue limit cut short (limit: concurrency or rate; docs/flow-control.md)",
            ["queue", "limit"],
            registry=r,
        )
        self.claimed = Counter(
            "dtq_worker_claimed_total", "Attempts started", ["queue"], registry=r
        )
        self.lease_lost = Counter(
            "dtq_lease_lost_total",
            "Attempts whose lease was taken over while this worker held them",
            ["queue"],
            registry=r,
        )
        self.stale_finish = Counter(
            "dtq_stale_finish_total",
            "Outcomes refused because the attempt's lease was gone",
            ["queue"],
            registry=r,
        )
        self.reclaimed = Counter(
            "dtq_reclaimed_total",
            "Attempts of dead workers taken back, by what happened to them (requeued, buried)",
            ["queue", "outcome"],
            registry=r,
        )
        self.entry_lost = Counter(
            "dtq_stream_entry_lost_total",
            "Pending entries whose stream entry had been deleted (an operator's trim)",
            ["queue"],
            registry=r,
        )
        self.released = Counter(
            "dtq_released_total",
            "Attempts handed back to the queue (drain, shutdown)",
            ["queue", "reason"],
            registry=r,
        )
        self.heartbeat_age = Gauge(
            "dtq_worker_heartbeat_age_seconds",
            "Seconds since the last successful heartbeat (lease extension) was sent; alert "
            "well before the visibility timeout",
            registry=r,
        )
        self.handler_processes = Gauge(
            "dtq_worker_handler_processes",
            'Processes kept for the handlers registered with executor="process"',
            registry=r,
        )
        self.handler_processes_replaced = Counter(
            "dtq_worker_handler_processes_replaced_total",
            "Handler processes killed and replaced, by why: the attempt's timeout, a cancel, "
            "a lost lease, the end of a drain, or the process died by itself",
            ["reason"],
            registry=r,
        )
        self.redis_errors = Counter(
            "dtq_worker_redis_errors_total",
            "Redis calls that failed, by loop",
            ["loop"],
            registry=r,
        )

    def prepare(self, queues: Iterable[str]) -> None:
        """Create the per-queue series at zero, so rate() and alerts see a zero, not nothing,
        until the first event."""
        for loop in REDIS_LOOPS:
            self.redis_errors.labels(loop)
        for reason in REPLACED_REASONS:
            self.handler_processes_replaced.labels(reason)
        for q in queues:
            self.claims.labels(q)
            self.claimed.labels(q)
            self.lease_lost.labels(q)
            self.stale_finish.labels(q)
            self.entry_lost.labels(q)
            for outcome in ("requeued", "buried"):
                self.reclaimed.labels(q, outcome)
            for reason in ("shutdown", "drain_timeout"):
                self.released.labels(q, reason)

    def watch(self, inflight: Callable[[], float], buffered: Callable[[], float]) -> None:
        """Gauges read at scrape time, not written per task."""
        self.inflight.set_function(inflight)
        self.buffered.set_function(buffered)
