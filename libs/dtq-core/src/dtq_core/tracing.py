"""OpenTelemetry set-up and trace-context propagation inside tasks.

The producer (SDK or API) starts a PRODUCER span and injects its context into the task's
headers; the worker extracts it and runs the handler in a CONSUMER span of the same trace
(OpenTelemetry messaging conventions). Without a configured exporter and without an active
span in the caller, nothing is created: the hot path pays one attribute lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind

_state = {"enabled": False}
_tracer = trace.get_tracer("dtq")


def configure_tracing(service_name: str, otlp_endpoint: str = "", exporter: Any = None) -> bool:
    """Install a tracer provider when an OTLP endpoint (or an exporter, in tests) is given.

    Returns:
        Whether tracing is on.
    """
    if not otlp_endpoint and exporter is None:
        return False
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415 - only when tracing is on
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SimpleSpanProcessor,
    )

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        # The exporter is the optional extra dtq-core[otlp].
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]  # noqa: PLC0415
            OTLPSpanExporter,
        )

        endpoint = otlp_endpoint.rstrip("/") + "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    enable()
    return True


def enable() -> None:
    """Turn span creation on (``configure_tracing`` does it; tests may call it directly)."""
    global _tracer  # noqa: PLW0603 - the module-level tracer follows the configured provider
    _state["enabled"] = True
    _tracer = trace.get_tracer("dtq")


def disable() -> None:
    """Stop creating spans in this process (tests restore the default with it)."""
    _state["enabled"] = False


def is_on() -> bool:
    """Whether spans are created in this process (an exporter was configured)."""
    return _state["enabled"]


def span_trace_id(span: trace.Span | None) -> str | None:
    if span is None:
        return None
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


def enabled() -> bool:
    return _state["enabled"] or trace.get_current_span().get_span_context().is_valid


@contextmanager
def producer_span(task: str, queue: str) -> Iterator[str]:
    """A PRODUCER span around a submit; yields the headers (JSON) to store with the task."""
    if not enabled():
        yield ""
        return
    with _tracer.start_as_current_span(
        f"publish {queue}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "dtq",
            "messaging.operation.type": "publish",
            "messaging.destination.name": queue,
            "dtq.task.name": task,
        },
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield msgspec.json.encode(carrier).decode()


@contextmanager
def consumer_span(
    headers: str, task: str, queue: str, task_id: str, attempt: int
) -> Iterator[trace.Span | None]:
    """The CONSUMER span of one execution, child of the producer's context."""
    if not _state["enabled"]:
        yield None
        return
    parent = otel_context.Context()
    if headers:
        parent = propagate.extract(msgspec.json.decode(headers))
    with _tracer.start_as_current_span(
        f"process {queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "dtq",
            "messaging.operation.type": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": task_id,
            "dtq.task.name": task,
            "dtq.task.attempt": attempt,
        },
    ) as span:
        yield span


def current_trace_id() -> str | None:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None
