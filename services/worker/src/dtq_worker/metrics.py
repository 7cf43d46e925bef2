"""The worker's Prometheus metrics (own registry; served on DTQ_WORKER_METRICS_PORT)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dtq_core.metrics import DURATION_BUCKETS


class WorkerMetrics:
    """Every metric a worker exports. Labels are queue, task and status: never ids."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.tasks = Counter(
            "dtq_tasks_total",
            "Executions finished, by outcome (succeeded, retrying, dead, failed, cancelled, "
            "stale: the lease was gone when the outcome arrived)",
            ["queue", "task", "status"],
            registry=r,
        )
        self.duration = Histogram(
            "dtq_task_duration_seconds",
            "Handler run time",
            ["queue", "task"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.wait = Histogram(
            "dtq_task_wait_seconds",
            "Time from queued to started (Redis time on both ends)",
            ["queue"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.inflight = Gauge("dtq_worker_inflight", "Handlers running now", registry=r)
        self.buffered = Gauge(
            "dtq_worker_prefetched", "Tasks claimed and waiting for a free slot", registry=r
        )
        self.concurrency = Gauge("dtq_worker_concurrency", "Configured concurrency", registry=r)
        self.claims = Counter(
            "dtq_worker_claims_total", "Claim round trips", ["queue"], registry=r
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
            "Seconds since the last successful lease extension (alert well before the "
            "visibility timeout)",
            registry=r,
        )
        self.redis_errors = Counter(
            "dtq_worker_redis_errors_total",
            "Redis calls that failed, by loop",
            ["loop"],
            registry=r,
        )
        self._task_children: dict[tuple[str, str, str], Counter] = {}
        self._duration_children: dict[tuple[str, str], Histogram] = {}
        self._wait_children: dict[str, Histogram] = {}

    def finished(self, queue: str, task: str, status: str, duration_s: float) -> None:
        """Count one execution (label children cached: ``labels()`` is a dict lookup + lock)."""
        key = (queue, task, status)
        counter = self._task_children.get(key)
        if counter is None:
            counter = self._task_children[key] = self.tasks.labels(queue, task, status)
        counter.inc()
        dkey = (queue, task)
        hist = self._duration_children.get(dkey)
        if hist is None:
            hist = self._duration_children[dkey] = self.duration.labels(queue, task)
        hist.observe(duration_s)

    def waited(self, queue: str, seconds: float) -> None:
        hist = self._wait_children.get(queue)
        if hist is None:
            hist = self._wait_children[queue] = self.wait.labels(queue)
        hist.observe(seconds)
