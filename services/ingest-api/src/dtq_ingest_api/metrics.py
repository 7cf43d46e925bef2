"""The ingest API's Prometheus metrics (one registry per app, served at ``/metrics``).

Labels are bounded: the route template (never the path with ids in it), the method, the
status; unmatched paths are counted under ``route="unmatched"``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dtq_core.infra.metrics import DURATION_BUCKETS, service_registry

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""Set (by ``dtq-ingest-api`` with ``DTQ_API_WORKERS`` > 1) before prometheus_client is first
imported in a worker process: every process then writes its samples to files there."""

METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})
AUTH_FAILURES = ("missing", "invalid", "scope", "origin", "host")


class ApiMetrics:
    """Request counts and latency, authentication failures and mode, submit outcomes."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self.registry = registry or service_registry("dtq-ingest-api", "dtq-ingest-api")
        self.requests = Counter(
            "dtq_http_requests",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "dtq_http_request_duration_seconds",
            "Time from the request's start to the end of its response.",
            ["route", "method"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "dtq_auth_failures",
            "Requests refused by authentication (missing key, invalid key, missing scope) or by "
            "the web policy (a foreign origin, a Host that is not served).",
            ["reason"],
            registry=self.registry,
        )
        self.auth_mode = Gauge(
            "dtq_auth_mode",
            'Authentication mode: 1 for the active one ("open" means no keys are configured).',
            ["mode"],
            registry=self.registry,
            multiprocess_mode="max",
        )
        self.submitted = Counter(
            "dtq_api_tasks_submitted",
            "Tasks submitted over REST by outcome (created, replayed, or the error code).",
            ["outcome"],
            registry=self.registry,
        )
        self.waits = Gauge(
            "dtq_api_waits",
            "Long-polls (GET /tasks/{id}/result?wait=) held now.",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.waits_refused = Counter(
            "dtq_api_waits_refused",
            "Long-polls refused with 429 too_many_waits, by the cap reached (key or total).",
            ["cap"],
            registry=self.registry,
        )
        # Known label values have their series from the start (a zero, not nothing).
        for reason in AUTH_FAILURES:
            self.auth_failures.labels(reason=reason)
        for cap in ("key", "total"):
            self.waits_refused.labels(cap=cap)

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "OTHER"
        # Label children are looked up once per (route, method, status): labels() parses
        # its arguments and takes a lock on every call.
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.requests.labels(route=route, method=method, status=str(status)),
                self.latency.labels(route=route, method=method),
            )
        children[0].inc()
        children[1].observe(seconds)
