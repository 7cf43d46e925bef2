"""Prometheus helpers shared by the services (each service defines its own metrics)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from dtq_core.infra.runtime import listen_error

DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    900,
    3600,
)


def serve_metrics(
    port: int,
    registry: CollectorRegistry,
    host: str = "0.0.0.0",  # noqa: S104 - scraped by Prometheus from other hosts
    *,
    setting: str,
) -> int:
    """Serve ``/metrics`` on ``port`` in a background thread; 0 turns it off.

    ``setting`` is the variable that holds ``port``, named when the port cannot be bound.

    Returns:
        The port served (0 when off).

    Raises:
        SettingsError: the port is in use or ``host`` is not an address of this machine.
    """
    if port == 0:
        return 0
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise listen_error(
            exc,
            host,
            port,
            port_setting=setting,
            host_setting="DTQ_METRICS_HOST",
            what="metrics port",
            can_turn_off=True,
        ) from None
    return port


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
