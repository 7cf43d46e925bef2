"""Producer spans of the SDK: off by default, inside the caller's span, across SyncClient's
thread, and the trace id a task's headers carry."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from dtq_core import Client, SyncClient
from dtq_core.infra import tracing
from dtq_devtools.testing import RedisServer


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    tracing.configure_tracing("dtq-test", exporter=spans)
    yield spans
    tracing.shutdown()


async def test_nothing_is_traced_without_an_exporter_or_a_span(client: Client) -> None:
    assert not tracing.active()
    handle = await client.enqueue("t")
    assert handle.trace_id is None


async def test_a_submit_inside_the_callers_span_is_its_child(
    client: Client, exporter: InMemorySpanExporter
) -> None:
    caller = TracerProvider().get_tracer("app")
    with caller.start_as_current_span("request") as parent:
        handle = await client.enqueue("t", queue="mail")
    (send,) = exporter.get_finished_spans()
    assert send.kind is SpanKind.PRODUCER
    assert send.name == "send mail"
    assert send.parent is not None
    assert send.parent.span_id == parent.get_span_context().span_id
    assert handle.trace_id == format(parent.get_span_context().trace_id, "032x")


async def test_sync_client_submits_in_the_callers_trace(
    redis_server: RedisServer, exporter: InMemorySpanExporter
) -> None:
    caller = TracerProvider().get_tracer("app")

    def submit() -> tuple[str | None, int]:
        with (
            SyncClient.from_url(redis_server.url, reject_unknown_queues=False) as sync,
            caller.start_as_current_span("job") as job,
        ):
            handle = sync.enqueue("t")
            return handle.trace_id, job.get_span_context().trace_id

    trace_id, caller_trace = await asyncio.to_thread(submit)
    assert trace_id == format(caller_trace, "032x")
    (send,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert send.context is not None
    assert send.context.trace_id == caller_trace


def test_header_trace_id() -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = '{"traceparent":"00-' + trace_id + '-00f067aa0ba902b7-01"}'
    assert tracing.header_trace_id(headers) == trace_id
    assert (
        tracing.header_trace_id('{"traceparent":"00-' + "0" * 32 + '-00f067aa0ba902b7-01"}') is None
    )
    assert tracing.header_trace_id('{"traceparent":"garbage"}') is None
    assert tracing.header_trace_id("{}") is None
    assert tracing.header_trace_id("not json") is None
