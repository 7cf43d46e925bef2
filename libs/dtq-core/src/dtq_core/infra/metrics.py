"""Prometheus helpers shared by the services (each service defines its own metrics).

- :func:`service_registry`: the registry every service exports, with ``dtq_build_info`` on it
  and without ``_created`` series.
- :func:`serve_metrics`: ``/metrics`` and ``/health`` on a port of their own (the worker and
  the scheduler; the API and the gateway serve both on their HTTP port).
- :class:`FastHistogram`: a histogram for hot paths, exposed as ``prometheus_client`` would.
"""

from __future__ import annotations

import socket
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import version
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics, make_wsgi_app
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from dtq_core.infra.liveness import HealthSource
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


def service_registry(service: str, distribution: str) -> CollectorRegistry:
    """The registry a service exports, holding ``dtq_build_info{service,version} 1``.

    ``version`` is the installed version of ``distribution`` (its ``pyproject.toml``, the one
    version source of each package), so a scrape shows which release every replica runs
    during a rolling upgrade.

    Also turns off, for the whole process, the ``<name>_created`` series ``prometheus_client``
    adds to every counter and histogram: Prometheus's text format stores them as gauges of
    their own, one more series per labelled child, which no query of dtq reads.

    Args:
        service: the service's name, as its logs and traces carry it (``dtq-worker``).
        distribution: the package whose version it reports (``dtq-worker``).
    """
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it untyped
    registry = CollectorRegistry(auto_describe=True)
    Gauge(
        "dtq_build_info",
        "1, labelled with the service and the version of its package",
        ["service", "version"],
        registry=registry,
        multiprocess_mode="max",  # one series for every process of a multi-process API
    ).labels(service, version(distribution)).set(1)
    return registry


class _Quiet(WSGIRequestHandler):
    """No line per request (Prometheus scrapes every few seconds), and a ``Server`` header
    that does not announce the Python version."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def version_string(self) -> str:
        return "dtq"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def metrics_app(registry: CollectorRegistry, health: HealthSource | None) -> Callable[..., Any]:
    """The WSGI app of a metrics port: ``GET /health`` answers ``health``'s report (404 when
    there is none); every other path the metrics, as ``prometheus_client`` serves them."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], respond: Callable[..., Any]) -> Iterable[bytes]:
        def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            # wsgiref would name itself and the Python version.
            return respond(status, [*headers, ("Server", "dtq")], *exc)

        if environ.get("PATH_INFO") != "/health":
            result: Iterable[bytes] = metrics(environ, start_response)
            return result
        if health is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"no liveness checks on this port\n"]
        report = health.report()
        body = report.body()
        status = "200 OK" if report.ok else "503 Service Unavailable"
        start_response(
            status,
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
            ],
        )
        return [body]

    return app


def serve_metrics(
    port: int,
    registry: CollectorRegistry,
    host: str = "0.0.0.0",  # noqa: S104 - scraped by Prometheus from other hosts
    *,
    setting: str,
    health: HealthSource | None = None,
) -> int:
    """Serve ``/metrics`` and ``/health`` on ``port`` in a background thread; 0 turns it off.

    The thread answers while the event loop is busy or stuck; ``/health`` reports ``health``'s
    checks (:mod:`dtq_core.infra.liveness`), which only a working loop keeps passing.
    ``setting`` is the variable that holds ``port``, named when the port cannot be bound.

    Returns:
        The port served (0 when off).

    Raises:
        SettingsError: the port is in use or ``host`` is not an address of this machine.
    """
    if port == 0:
        return 0
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        server_class = type("MetricsServer", (_Server,), {"address_family": family})
        httpd: WSGIServer = make_server(
            host, port, metrics_app(registry, health), server_class, handler_class=_Quiet
        )
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
    threading.Thread(target=httpd.serve_forever, name="dtq-metrics", daemon=True).start()
    return port


def _le(bound: float) -> str:
    le: str = floatToGoString(bound)  # type: ignore[no-untyped-call]  # untyped upstream
    return le


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
        # "1.0", "2.5", "+Inf": the le values prometheus_client's own histograms carry.
        self.les = tuple(_le(b) for b in (*buckets, float("inf")))
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
            for le, count in zip(self.les, series[:-1], strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(labels), buckets, series[-1])
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
