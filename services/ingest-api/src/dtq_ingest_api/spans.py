"""The HTTP server span of every API request, through Litestar's OpenTelemetry plugin.

The plugin's middleware (``opentelemetry-instrumentation-asgi``) continues the caller's W3C
``traceparent`` and opens a SERVER span around the request; a submit's PRODUCER span is its
child. It is added only while tracing is on (:func:`dtq_core.infra.tracing.is_on`), so an API
without an exporter runs no middleware for it and does not import this module.

Spans follow the stable HTTP conventions (``http.request.method``, ``url.path``,
``http.response.status_code``, ``http.route``, ``error.type`` on a 5xx) unless
``OTEL_SEMCONV_STABILITY_OPT_IN`` asks otherwise. A span is named ``{method} {route}`` once the
route is known (``POST /api/v1/tasks/{task_id}/cancel``), never after the raw path, which
carries task ids (the conventions ask for low-cardinality names); a request no route matched
keeps the method alone. Probes and scrapes (``/health``, ``/ready``, ``/metrics``) make no span.
"""

from __future__ import annotations

import os
from typing import Any

import structlog
from litestar.enums import ScopeType
from litestar.middleware import DefineMiddleware
from litestar.plugins.opentelemetry import (
    OpenTelemetryConfig,
    OpenTelemetryInstrumentationMiddleware,
)
from litestar.types import Message, Receive, Scope, Send
from opentelemetry import trace

from dtq_core.infra import tracing

QUIET_PATHS = r"^/(health|ready|metrics)$"
"""Requests that make no span: every probe and scrape would be a trace of its own."""

SEMCONV_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"

HTTP_ROUTE = "http.route"


def _method_only(scope: Scope) -> tuple[str, dict[str, Any]]:
    """The span's name before routing: the method (the conventions' fallback)."""
    return str(scope.get("method", "HTTP")), {}


class RouteNamedSpans(OpenTelemetryInstrumentationMiddleware):
    """The plugin's middleware, naming the span after the matched route when the response
    starts (routing has happened then, and the span is still the current one)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                _name_after_route(scope)
            await send(message)

        await super().__call__(scope, receive, named)


def _name_after_route(scope: Scope) -> None:
    span = trace.get_current_span()
    template = scope.get("path_template")
    if span.is_recording() and template:
        span.update_name(f"{scope.get('method', 'HTTP')} {template}")
        span.set_attribute(HTTP_ROUTE, template)
    trace_id = tracing.span_trace_id(span)
    if trace_id is not None:
        # The request's log line carries the trace it belongs to (a submit binds it too).
        structlog.contextvars.bind_contextvars(trace_id=trace_id)


def server_spans() -> DefineMiddleware:
    """The middleware that wraps every request in its SERVER span (Litestar moves it outside
    every other middleware, as its OpenTelemetry plugin), for an app built while tracing is
    on."""
    # The instrumentation reads this once, when the first middleware is built; the stable HTTP
    # attribute names unless the operator chose (``http/dup`` emits both generations).
    os.environ.setdefault(SEMCONV_OPT_IN, "http")
    config = OpenTelemetryConfig(
        tracer_provider=tracing.tracer_provider(),
        scope_span_details_extractor=_method_only,
        exclude=QUIET_PATHS,
        # Without these, each request would add a span per ASGI message sent or received.
        exclude_spans=["receive", "send"],
        scopes={ScopeType.HTTP},
        middleware_class=RouteNamedSpans,
    )
    # As middleware, not OpenTelemetryPlugin(config): the plugin builds the base class and
    # would drop middleware_class (Litestar 2.25).
    return config.middleware
