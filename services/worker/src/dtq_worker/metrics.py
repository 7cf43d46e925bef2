"""The worker's Prometheus metrics (own registry; served on DTQ_WORKER_METRICS_PORT).

Per-task metrics sit on the hot path (tens of thousands of tasks a second), so counters are
added up per finish batch, gauges are read when scraped, and the two per-task histograms are
plain bucket arrays exposed by a collector (``prometheus_client``'s ``observe`` takes a lock
and costs about 3 µs).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from dtq_core.metrics import DURATION_BUCKETS


class FastHistogram(Collector):
    """A histogram whose ``observe`` is a bisect and two additions (one event loop: no lock)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: tuple[str, ...],
        buckets: tuple[float, ...] = DURATION_BUCKETS,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.bounds = buckets
        self.series: dict[tuple[str, ...], list[float]] = {}

    def child(self, *labels: str) -> list[float]:
        """The counts for ``labels``: one per bucket, then +Inf, then the sum."""
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = [0.0] * (len(self.bounds) + 2)
        return series

    def observe(self, series: list[float], value: float) -> None:
        series[bisect_left(self.bounds, value)] += 1
        series[-1] += value

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in list(self.series.items()):
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*self.bounds, float("inf")), series[:-1], strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric(list(labels), buckets, series[-1])
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)


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

    def watch(self, inflight: Callable[[], float], buffered: Callable[[], float]) -> None:
        """Gauges read at scrape time, not written per task."""
        self.inflight.set_function(inflight)
        self.buffered.set_function(buffered)
