"""The local trace viewer's receiver, through its real socket."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from dtq_devtools.traceview import MAX_BODY, TraceStore, serve


@pytest.fixture
def receiver() -> Iterator[str]:
    (server,) = serve(TraceStore(), "127.0.0.1", [0])
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()
    server.server_close()


def _post(url: str, body: bytes) -> httpx.Response:
    headers = {"content-type": "application/x-protobuf", "content-encoding": "gzip"}
    return httpx.post(url, content=body, headers=headers, timeout=30)


def test_a_gzip_bomb_is_413_without_inflating_it_whole(receiver: str) -> None:
    bomb = gzip.compress(b"\0" * (MAX_BODY * 4), compresslevel=9)
    assert len(bomb) < MAX_BODY // 100  # small on the wire
    answer = _post(receiver, bomb)
    assert answer.status_code == 413, answer.text
    assert _post(receiver, b"not gzip").status_code == 400


def test_a_gzip_export_within_the_limit_is_taken(receiver: str) -> None:
    answer = _post(receiver, gzip.compress(ExportTraceServiceRequest().SerializeToString()))
    assert answer.status_code == 200
