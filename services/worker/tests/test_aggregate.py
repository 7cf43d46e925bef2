"""The supervisor's ``/metrics``: the worker processes' expositions added up (pure: two real
:class:`~dtq_worker.metrics.WorkerMetrics` registries stand for two processes)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from dtq_worker import aggregate
from dtq_worker.metrics import WorkerMetrics


def _process(succeeded: int, inflight: int, age: float, durations: list[float]) -> WorkerMetrics:
    m = WorkerMetrics()
    m.prepare(["default"])
    m.tasks.labels("default", "t", "succeeded").inc(succeeded)
    m.concurrency.set(10)
    m.watch(lambda: inflight, lambda: 0)
    m.heartbeat_age.set(age)
    series = m.duration.child("default", "t")
    for d in durations:
        m.duration.observe(series, d)
    return m


def _text(m: WorkerMetrics) -> str:
    return generate_latest(m.registry).decode()


def _samples(parsed: aggregate.Parsed) -> dict[str, float]:
    """``name{labels}`` -> value, through a real exposition of the merged families."""

    class Merged(Collector):
        def collect(self) -> list[Metric]:
            return aggregate.metrics(parsed)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Merged())
    text = generate_latest(registry).decode()
    return {
        s.name + str(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counters_histograms_and_gauges_combine_by_kind() -> None:
    a = _process(succeeded=3, inflight=2, age=0.5, durations=[0.001, 0.2])
    b = _process(succeeded=4, inflight=5, age=1.5, durations=[0.2])
    merged = _samples(aggregate.Aggregate().merge({0: _text(a), 1: _text(b)}))
    key = "[('queue', 'default'), ('status', 'succeeded'), ('task', 't')]"
    assert merged["dtq_tasks_total" + key] == 7
    assert merged["dtq_worker_inflight[]"] == 7  # handlers running over the processes
    assert merged["dtq_worker_concurrency[]"] == 20
    assert merged["dtq_worker_heartbeat_age_seconds[]"] == 1.5  # the worst, not a sum
    assert merged["dtq_build_info[('service', 'dtq-worker'), ('version', '0.1.0')]"] == 1
    hist = "[('queue', 'default'), ('task', 't')]"
    assert merged["dtq_task_duration_seconds_count" + hist] == 3
    assert round(merged["dtq_task_duration_seconds_sum" + hist], 6) == 0.401
    le = "[('le', '0.0025'), ('queue', 'default'), ('task', 't')]"
    assert merged["dtq_task_duration_seconds_bucket" + le] == 1


def test_a_process_that_ended_keeps_counting_so_sums_never_drop() -> None:
    agg = aggregate.Aggregate()
    key = "[('queue', 'default'), ('status', 'succeeded'), ('task', 't')]"
    a = _process(succeeded=10, inflight=1, age=0.1, durations=[])
    b = _process(succeeded=5, inflight=1, age=0.1, durations=[])
    assert _samples(agg.merge({0: _text(a), 1: _text(b)}))["dtq_tasks_total" + key] == 15
    # Slot 1 stops answering (stopped, wedged): its counters as last read stand in, its
    # gauges are left out.
    mid = _samples(agg.merge({0: _text(a), 1: None}))
    assert mid["dtq_tasks_total" + key] == 15
    assert mid["dtq_worker_inflight[]"] == 1
    # It died and its replacement starts from zero: the sum goes on from 15.
    agg.retire(1)
    fresh = _process(succeeded=2, inflight=0, age=0.1, durations=[])
    after = _samples(agg.merge({0: _text(a), 1: _text(fresh)}))
    assert after["dtq_tasks_total" + key] == 17
    assert after["dtq_worker_inflight[]"] == 1
