"""OpenTelemetry set-up and trace-context propagation inside tasks.

The producer (SDK or API) starts a PRODUCER span and injects its context into the task's
headers (W3C ``traceparent``); the worker extracts it and runs each attempt in a CONSUMER span
that is a child of the producer span, so the caller, the submit and every attempt (retries and
reclaimed attempts included) are one trace. Names and attributes follow the OpenTelemetry
messaging conventions (``docs/tracing.md`` lists them).

Without a configured exporter, and without an active span in the caller, nothing is created:
the worker's hot path pays one attribute lookup (:func:`is_on`), the SDK's one context lookup
(:func:`active`). Only the OpenTelemetry API is imported here: the SDK and the exporter (the
``otlp`` extra) are imported by :func:`configure_tracing`, once an endpoint is configured.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any

import msgspec
import structlog
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from dtq_core.errors import SettingsError
from dtq_core.infra.otel_config import export_config, public_endpoint
from dtq_core.names import make_task_id

SYSTEM = "dtq"
"""``messaging.system`` of every dtq span."""

CONSUMER_GROUP = "workers"
"""The consumer group every worker reads with (``messaging.consumer.group.name``)."""

_state = {"enabled": False}
_provider: dict[str, Any] = {"current": None}
_tracer: trace.Tracer = trace.get_tracer("dtq")
_OFF: AbstractContextManager[None] = nullcontext()
_headers_decoder = msgspec.json.Decoder(dict[str, str])
_log = structlog.get_logger()


def configure_tracing(
    service_name: str,
    otlp_endpoint: str = "",
    exporter: Any = None,
    *,
    env: Mapping[str, str] | None = None,
) -> bool:
    """Install a tracer provider when an OTLP endpoint is configured (or an exporter is given,
    in tests); :mod:`dtq_core.infra.otel_config` says which variable wins.

    Spans go as protobuf over HTTP through a batch processor to
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces``,
    else ``<otlp_endpoint>/v1/traces``; ``OTEL_SDK_DISABLED=true`` turns everything off,
    ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the resource. The SDK's own
    ``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_HEADERS``/``_TIMEOUT``/``_COMPRESSION`` and
    ``OTEL_TRACES_SAMPLER``(``_ARG``) variables apply. The first provider configured in a
    process also becomes the global one, so handlers' own spans join the same traces.

    Needs the ``otlp`` extra (``dtq-core[otlp]``: the SDK and the exporter); without a
    configured endpoint nothing is imported, and tracing stays off.

    Args:
        service_name: the process's ``service.name`` unless ``OTEL_SERVICE_NAME`` (or
            ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) says otherwise.
        otlp_endpoint: ``DTQ_OTLP_ENDPOINT``: the collector's base URL, e.g.
            ``http://collector:4318``, read when no ``OTEL_EXPORTER_OTLP_*ENDPOINT`` is set.
        exporter: a span exporter to use instead (spans are exported one by one, for tests).
        env: the environment to read (``os.environ`` when ``None``).

    Returns:
        Whether tracing is on.

    Raises:
        SettingsError: a variable the exporter would fail on (naming it), or an endpoint
            configured where the SDK is not installed.
    """
    config = export_config(service_name, otlp_endpoint, env)
    if config.disabled:
        _log.info("tracing_disabled", variable="OTEL_SDK_DISABLED")
        return False
    if not config.endpoint and exporter is None:
        return False
    try:
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415 - tracing on only
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
            BatchSpanProcessor,
            SimpleSpanProcessor,
        )
    except ImportError:
        variable = config.source or "exporter"
        raise SettingsError(
            f"{variable} asks for traces, but the OpenTelemetry SDK is not installed: install "
            "dtq-core[otlp]",
            variable=variable,
        ) from None

    provider = TracerProvider(resource=Resource.create(dict(config.attributes)))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.endpoint)))
        if config.shadowed:
            _log.warning(
                "tracing_endpoint_shadowed",
                ignored=config.shadowed,
                used=config.source,
            )
        _log.info(
            "tracing_on",
            endpoint=public_endpoint(config.endpoint),
            source=config.source,
            service=config.service_name,
        )
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # The global provider can be set once per process; later calls (tests) keep theirs
        # through the module's tracer only.
        trace.set_tracer_provider(provider)
    _provider["current"] = provider
    enable(provider.get_tracer("dtq"))
    return True


def tracer_provider() -> Any:
    """The tracer provider :func:`configure_tracing` installed (``None`` while off): what
    instrumentations of this process (the API's HTTP server spans) create their spans with."""
    return _provider["current"]


def flush() -> None:
    """Export the spans buffered so far (a no-op without a configured provider).

    The SDK flushes at interpreter exit; a process that ends otherwise (uvicorn re-raises the
    SIGTERM it handled) calls this on its way out."""
    provider = _provider["current"]
    if provider is not None:
        provider.force_flush()


def shutdown() -> None:
    """Export what is buffered, stop the configured provider and stop creating spans (the
    SDK stops the provider at interpreter exit too; tests end their tracing with it)."""
    provider = _provider["current"]
    _provider["current"] = None
    disable()
    if provider is not None:
        provider.shutdown()


def enable(tracer: trace.Tracer | None = None) -> None:
    """Turn span creation on (``configure_tracing`` does it; tests may call it directly)."""
    global _tracer  # noqa: PLW0603 - the module-level tracer follows the configured provider
    _state["enabled"] = True
    _tracer = tracer or trace.get_tracer("dtq")


def disable() -> None:
    """Stop creating spans in this process (tests restore the default with it)."""
    global _tracer  # noqa: PLW0603
    _state["enabled"] = False
    _tracer = trace.get_tracer("dtq")


def is_on() -> bool:
    """Whether spans are created in this process (an exporter was configured)."""
    return _state["enabled"]


def active() -> bool:
    """Whether a submit should be traced: tracing is on, or the caller is inside a span of
    its own (an application with its own OpenTelemetry set-up)."""
    return _state["enabled"] or trace.get_current_span().get_span_context().is_valid


def ids(span: trace.Span | None) -> tuple[str | None, str | None]:
    """``(trace_id, span_id)`` of ``span`` in hex, as logs carry them."""
    if span is None:
        return None, None
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None, None
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def span_trace_id(span: trace.Span | None) -> str | None:
    """The trace id of ``span`` in hex (``None`` without a valid span)."""
    return ids(span)[0]


def current_trace_id() -> str | None:
    """The trace id of the current span in hex (``None`` outside a span)."""
    return ids(trace.get_current_span())[0]


def header_trace_id(headers: str) -> str | None:
    """The trace id a task's headers carry (W3C ``traceparent``), without starting a span:
    a worker with tracing off still logs the producer's trace id."""
    try:
        parent = _headers_decoder.decode(headers).get("traceparent", "")
    except msgspec.DecodeError:
        return None
    parts = parent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return None
    return parts[1]


def current_headers() -> str:
    """The trace context of the current span, as a task's headers (``""``: not traced)."""
    return _inject() if active() else ""


def _inject() -> str:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return msgspec.json.encode(carrier).decode() if carrier else ""


def _attributes(operation: str, queue: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }
    if queue is not None:
        attrs["messaging.destination.name"] = queue
    return attrs


ERROR_TYPE = "error.type"
"""The attribute naming what a failed operation failed with (the conventions' ``error.type``):
the exception's class name, as the task's error history records it."""


@contextmanager
def _span(
    name: str,
    kind: SpanKind,
    attrs: dict[str, Any],
    parent: otel_context.Context | None = None,
) -> Iterator[trace.Span]:
    """A span of this module, current inside; an exception leaving it is recorded on it with
    status ERROR (the SDK does that) and ``error.type`` (this does)."""
    with _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attrs) as s:
        try:
            yield s
        except Exception as exc:
            s.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            raise


def _error(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


class Send:
    """The PRODUCER span of one submitted task."""

    __slots__ = ("headers", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.headers = _inject()

    @property
    def trace_id(self) -> str | None:
        return ids(self.span)[0]

    def done(self, result: object) -> None:
        """Record the submit's answer: the task id, or the error that refused the task."""
        if isinstance(result, BaseException):
            _error(self.span, result)
            return
        task_id = getattr(result, "id", None)
        if task_id is not None:
            self.span.set_attribute("messaging.message.id", task_id)
        if getattr(result, "created", True) is False:
            # An idempotent replay: the task that runs carries the original submit's context.
            self.span.set_attribute("dtq.task.replayed", True)


def send_span(task: str, queue: str) -> AbstractContextManager[Send | None]:
    """A ``send <queue>`` PRODUCER span around the submit of one task; yields ``None`` when
    the submit is not traced (see :func:`active`)."""
    if not active():
        return _OFF
    return _send(task, queue)


@contextmanager
def _send(task: str, queue: str) -> Iterator[Send]:
    attrs = _attributes("send", queue)
    attrs["dtq.task.name"] = task
    with _span(f"send {queue}", SpanKind.PRODUCER, attrs) as s:
        yield Send(s)


class Batch:
    """A ``send`` CLIENT span around a batch submit, and one ``create`` PRODUCER span per task
    whose context that task carries (the messaging conventions' batch shape)."""

    __slots__ = ("count", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.count = 0

    @property
    def trace_id(self) -> str | None:
        return ids(self.span)[0]

    @contextmanager
    def create(self, task: str, queue: str, rand: str) -> Iterator[str]:
        """The ``create <queue>`` span of one task, around its validation; yields the
        headers the task carries. A task refused by validation leaves an ERROR span."""
        attrs = _attributes("create", queue)
        attrs["messaging.message.id"] = make_task_id(queue, rand)
        attrs["dtq.task.name"] = task
        with _span(f"create {queue}", SpanKind.PRODUCER, attrs):
            yield _inject()
            self.count += 1

    def done(self, results: Sequence[object]) -> None:
        """Record how many tasks were sent and how many of them were refused."""
        refused = sum(isinstance(r, BaseException) for r in results)
        self.span.set_attribute("messaging.batch.message_count", self.count)
        if refused:
            self.span.set_attribute("dtq.batch.refused", refused)


def batch_span(requests: Iterable[object]) -> AbstractContextManager[Batch | None]:
    """The span of a batch submit of ``requests`` (named after their queue when they share
    one); yields ``None`` when the submit is not traced."""
    if not active():
        return _OFF
    return _batch(requests)


@contextmanager
def _batch(requests: Iterable[object]) -> Iterator[Batch]:
    distinct = sorted({q for r in requests if isinstance(q := getattr(r, "queue", None), str)})
    queue = distinct[0] if len(distinct) == 1 else None
    name = f"send {queue}" if queue is not None else "send"
    with _span(name, SpanKind.CLIENT, _attributes("send", queue)) as s:
        yield Batch(s)


def workflow_span(name: str, workflow_id: str) -> AbstractContextManager[Send | None]:
    """The ``workflow <name>`` PRODUCER span around a workflow's submit: every step's task is
    a child of it (:func:`step_headers`), so a workflow is one trace. ``None`` when the submit
    is not traced."""
    if not active():
        return _OFF
    return _workflow(name, workflow_id)


@contextmanager
def _workflow(name: str, workflow_id: str) -> Iterator[Send]:
    attrs = _attributes("send", None)
    attrs["dtq.workflow.id"] = workflow_id
    with _span(f"workflow {name}", SpanKind.PRODUCER, attrs) as s:
        yield Send(s)


def step_headers(workflow_headers: str, task: str, queue: str, rand: str) -> str:
    """The headers of a workflow step's task: a ``create <queue>`` span, child of the
    workflow's span (its headers), when this process traces; else the workflow's context as
    it is (the step's process span is then the workflow span's child)."""
    if not workflow_headers or not _state["enabled"]:
        return workflow_headers
    try:
        parent = propagate.extract(_headers_decoder.decode(workflow_headers))
    except msgspec.DecodeError:
        return ""
    attrs = _attributes("create", queue)
    attrs["messaging.message.id"] = make_task_id(queue, rand)
    attrs["dtq.task.name"] = task
    with _tracer.start_as_current_span(
        f"create {queue}", context=parent, kind=SpanKind.PRODUCER, attributes=attrs
    ):
        return _inject()


class Process:
    """The CONSUMER span of one attempt."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def done(
        self,
        outcome: str,
        error_type: str | None = None,
        message: str = "",
        error: BaseException | None = None,
    ) -> None:
        """Record how the attempt ended: ``ok``, ``retry``, ``dead``, ``cancel`` or
        ``released`` (handed back unfinished). A failed attempt (``retry``/``dead``) gets
        status ERROR, ``error.type`` (the error history's ``type``) and an ``exception``
        event."""
        span = self.span
        span.set_attribute("dtq.task.outcome", outcome)
        if outcome not in {"retry", "dead"} or error_type is None:
            return
        if error is not None:
            span.record_exception(error)
        else:
            span.add_event(
                "exception", {"exception.type": error_type, "exception.message": message}
            )
        span.set_attribute(ERROR_TYPE, error_type)
        span.set_status(Status(StatusCode.ERROR, f"{error_type}: {message}"))


@contextmanager
def process_span(
    headers: str,
    *,
    task: str,
    queue: str,
    task_id: str,
    attempt: int,
    max_attempts: int,
    consumer: str,
) -> Iterator[Process]:
    """The ``process <queue>`` CONSUMER span of one attempt, child of the task's producer
    span (a new trace when the task carries no context)."""
    parent = otel_context.Context()
    if headers:
        with suppress(msgspec.DecodeError):
            parent = propagate.extract(_headers_decoder.decode(headers))
    attrs = _attributes("process", queue)
    attrs.update(
        {
            "messaging.message.id": task_id,
            "messaging.consumer.group.name": CONSUMER_GROUP,
            "messaging.client.id": consumer,
            "dtq.task.name": task,
            "dtq.task.attempt": attempt,
            "dtq.task.max_attempts": max_attempts,
        }
    )
    with _span(f"process {queue}", SpanKind.CONSUMER, attrs, parent) as s:
        yield Process(s)
