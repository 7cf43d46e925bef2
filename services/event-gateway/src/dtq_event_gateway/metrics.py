"""The gateway's Prometheus metrics (own registry, served at ``/metrics``).

Sending is the hot path (events × clients a second), so the per-send figures are plain
integers and bucket arrays read by a collector at scrape time: ``prometheus_client``'s
``inc``/``observe`` take a lock each (about 1-3 µs). One event loop writes them: no lock needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from dtq_core.infra.metrics import FastHistogram, service_registry

DELAY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Event delay: Redis stream time of the event to the moment it is handed to the socket."""

TRANSPORTS = ("ws", "sse")


class _HotPath(Collector):
    """Counters kept as numbers and exposed when scraped (the delay histogram is a
    :class:`dtq_core.infra.metrics.FastHistogram`)."""

    def __init__(self) -> None:
        self.sent = dict.fromkeys(TRANSPORTS, 0)
        self.read = 0

    def collect(self) -> Iterator[Metric]:
        sent = CounterMetricFamily(
            "dtq_gateway_events_sent", "Event frames handed to clients", labels=["transport"]
        )
        for transport, value in self.sent.items():
            sent.add_metric([transport], value)
        yield sent
        yield CounterMetricFamily(
            "dtq_gateway_events_read", "Events read from Redis (one per task)", value=self.read
        )

    def describe(self) -> Iterator[Metric]:
        return self.collect()


def _bound(count: Callable[[str], int], transport: str) -> Callable[[], float]:
    return lambda: count(transport)


class GatewayMetrics:
    """Every metric the gateway exports. Labels are bounded: transport and reason."""

    def __init__(self) -> None:
        self.registry = service_registry("dtq-event-gateway", "dtq-event-gateway")
        r = self.registry
        self._hot = _HotPath()
        r.register(self._hot)
        self._delay = FastHistogram(
            "dtq_gateway_event_delay_seconds",
            "Seconds from the event's Redis time to its send to a live client (replays, "
            "which are late on purpose, are not observed)",
            (),
            DELAY_BUCKETS,
        )
        r.register(self._delay)
        self._delay_series = self._delay.child()
        self.clients = Gauge("dtq_gateway_clients", "Connected clients", ["transport"], registry=r)
        self.gaps = Counter(
            "dtq_gateway_gaps",
            "Gap messages sent, by reason (slow_consumer, retention, reset)",
            ["reason"],
            registry=r,
        )
        self.redis_errors = Counter(
            "dtq_gateway_redis_errors", "Failed Redis calls (reads and replays)", registry=r
        )
        self.refused = Counter(
            "dtq_gateway_refused",
            "Connections refused, by reason (unauthorized, forbidden, forbidden_origin, "
            "host_not_allowed, limit, bad_request, unavailable)",
            ["reason"],
            registry=r,
        )
        # Every known label value has its series from the start, so rate() and alerts see a
        # zero rather than nothing.
        for reason in ("slow_consumer", "retention", "reset"):
            self.gaps.labels(reason)
        for reason in (
            "unauthorized",
            "forbidden",
            "forbidden_origin",
            "host_not_allowed",
            "limit",
            "bad_request",
            "unavailable",
        ):
            self.refused.labels(reason)
        for transport in TRANSPORTS:
            self.clients.labels(transport)

    def watch_clients(self, count: Callable[[str], int]) -> None:
        """The client gauge is read when scraped."""
        for transport in TRANSPORTS:
            self.clients.labels(transport).set_function(_bound(count, transport))

    def sent(self, transport: str) -> None:
        self._hot.sent[transport] += 1

    def delay(self, seconds: float) -> None:
        self._delay.observe(self._delay_series, seconds)

    def read(self, events: int) -> None:
        self._hot.read += events

    @property
    def sent_total(self) -> int:
        return sum(self._hot.sent.values())
