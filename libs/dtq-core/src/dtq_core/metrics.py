"""Prometheus helpers shared by the services (each service defines its own metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server

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


def serve_metrics(port: int, registry: CollectorRegistry, host: str = "0.0.0.0") -> int:  # noqa: S104 - scraped by Prometheus from other hosts
    """Serve ``/metrics`` on ``port`` in a background thread; 0 turns it off.

    Returns:
        The port served (0 when off).
    """
    if port == 0:
        return 0
    start_http_server(port, addr=host, registry=registry)
    return port
