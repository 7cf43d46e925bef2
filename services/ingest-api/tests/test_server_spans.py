"""The API's HTTP server spans (Litestar's OpenTelemetry plugin): one SERVER span per request,
named after its route, continuing the caller's traceparent, the parent of a submit's PRODUCER
span; none for probes and scrapes; none at all while tracing is off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from dtq_core.infra import tracing

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    tracing.configure_tracing("dtq-ingest-api", exporter=spans, env={})
    yield spans
    tracing.shutdown()


def servers(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]


def hexid(value: int, width: int) -> str:
    return format(value, f"0{width}x")


async def test_a_rest_submit_is_a_server_span_parent_of_the_producer_span(
    api_factory: Any, exporter: InMemorySpanExporter
) -> None:
    api = api_factory(open=True)
    r = await api.http.post(
        "/api/v1/tasks", json={"task": "t"}, headers={"traceparent": TRACEPARENT}
    )
    assert r.status_code == 201, r.text
    task_id = r.json()["id"]
    (server,) = servers(exporter)
    (producer,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    assert server.name == "POST /api/v1/tasks"
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/api/v1/tasks"
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.response.status_code"] == 201
    assert server.attributes["url.path"] == "/api/v1/tasks"
    assert server.parent is not None
    assert (hexid(server.context.trace_id, 32), hexid(server.parent.span_id, 16)) == (
        CALLER_TRACE,
        CALLER_SPAN,
    )
    assert producer.parent is not None
    assert producer.parent.span_id == server.context.span_id
    assert producer.attributes is not None
    assert producer.attributes["messaging.message.id"] == task_id
    # GET /tasks/{id} gives the task's trace.
    got = (await api.http.get(f"/api/v1/tasks/{task_id}")).json()
    assert got["trace_id"] == CALLER_TRACE


async def test_span_names_are_routes_not_paths_and_probes_make_none(
    api_factory: Any, exporter: InMemorySpanExporter
) -> None:
    api = api_factory(open=True)
    task_id = "default:" + "0" * 32
    assert (await api.http.get(f"/api/v1/tasks/{task_id}")).status_code == 404
    assert (await api.http.get("/api/v1/no/such/route")).status_code == 404
    for probe in ("/health", "/ready", "/metrics"):
        assert (await api.http.get(probe)).status_code == 200
    named = servers(exporter)
    assert [s.name for s in named] == ["GET /api/v1/tasks/{task_id}", "GET"]
    first = named[0]
    assert first.attributes is not None
    assert first.attributes["http.route"] == "/api/v1/tasks/{task_id}"
    assert first.attributes["http.response.status_code"] == 404
    # A 4xx is the client's error: the server span's status stays unset.
    assert first.status.status_code is StatusCode.UNSET
    assert all(s.parent is None for s in named)  # no traceparent: each starts a trace


async def test_no_server_span_while_tracing_is_off(api_factory: Any) -> None:
    api = api_factory(open=True)
    assert not tracing.is_on()
    r = await api.http.post(
        "/api/v1/tasks", json={"task": "t"}, headers={"traceparent": TRACEPARENT}
    )
    assert r.status_code == 201
    # The caller's context is not continued either: tracing off is off.
    assert (await api.http.get(f"/api/v1/tasks/{r.json()['id']}")).json()["trace_id"] is None
