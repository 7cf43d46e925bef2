"""A small OTLP/HTTP trace receiver with a browser view, for local runs without a collector.

``just up`` runs it (``python -m dtq_devtools.traceview``) and points every service's
``DTQ_OTLP_ENDPOINT`` at it: spans arrive on ``POST /v1/traces`` (OTLP over HTTP, protobuf,
the exporter's default) and the recent traces are shown at ``/`` of the UI port, each as a
tree of spans with their attributes. ``/api/traces?task_id=`` answers the traces of one task
as JSON. It keeps the last traces in memory only; a real deployment sends spans to an
OpenTelemetry collector instead (docker-compose's ``tracing`` profile).
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUSES = {0: "UNSET", 1: "OK", 2: "ERROR"}
MAX_BODY = 16 * 1024 * 1024
"""Largest export accepted, as sent and once inflated: gzip packs a run of zeros about 1000
to 1, so a small body could otherwise fill the memory of the machine."""


class TooLargeError(Exception):
    """An export inflates past :data:`MAX_BODY`."""


def inflate(body: bytes, limit: int = MAX_BODY) -> bytes:
    """``body`` gunzipped, refused as soon as it inflates past ``limit`` bytes.

    Raises:
        TooLargeError: past ``limit``.
        zlib.error: not gzip data.
    """
    stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = stream.decompress(body, limit + 1)
    if len(out) > limit:
        raise TooLargeError
    return out


@dataclass
class Span:
    """One exported span, decoded from OTLP protobuf."""

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status: str
    start_ns: int = 0
    end_ns: int = 0
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    """The resource attributes of the process that made it (``service.name`` included)."""

    @property
    def duration_ms(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e6


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def decode(request: ExportTraceServiceRequest) -> list[Span]:
    """Every span of an OTLP export request, with its resource's ``service.name``."""
    spans: list[Span] = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for scope in rs.scope_spans:
            for s in scope.spans:
                spans.append(
                    Span(
                        service=str(resource.get("service.name")),
                        name=s.name,
                        kind=KINDS.get(s.kind, "INTERNAL"),
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        status=STATUSES.get(s.status.code, "UNSET"),
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        events=[
                            (e.name, {a.key: _value(a.value) for a in e.attributes})
                            for e in s.events
                        ],
                        resource=resource,
                    )
                )
    return spans


class TraceStore:
    """The last ``max_traces`` traces, thread-safe."""

    def __init__(self, max_traces: int = 2000) -> None:
        self.max_traces = max_traces
        self._traces: OrderedDict[str, list[Span]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, spans: list[Span]) -> None:
        with self._lock:
            for span in spans:
                self._traces.setdefault(span.trace_id, []).append(span)
                self._traces.move_to_end(span.trace_id)
            while len(self._traces) > self.max_traces:
                self._traces.popitem(last=False)

    def spans(self) -> list[Span]:
        with self._lock:
            return [s for spans in self._traces.values() for s in spans]

    def trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return sorted(self._traces.get(trace_id, []), key=lambda s: s.start_ns)

    def traces(self) -> list[list[Span]]:
        """Newest first."""
        with self._lock:
            return [sorted(v, key=lambda s: s.start_ns) for v in reversed(self._traces.values())]

    def find(self, **attrs: Any) -> list[Span]:
        """Spans whose attributes include ``attrs`` (``kind=``, ``service=`` and ``name=``
        match those)."""
        kind = attrs.pop("kind", None)
        service = attrs.pop("service", None)
        name = attrs.pop("name", None)
        return [
            s
            for s in self.spans()
            if (kind is None or s.kind == kind)
            and (service is None or s.service == service)
            and (name is None or s.name == name)
            and all(s.attributes.get(k) == v for k, v in attrs.items())
        ]


def _task_id(spans: list[Span]) -> str:
    ids = (s.attributes.get("messaging.message.id") for s in spans)
    return next((str(i) for i in ids if i), "")


def _summary(spans: list[Span]) -> dict[str, Any]:
    root = spans[0]
    start = min(s.start_ns for s in spans)
    end = max(s.end_ns for s in spans)
    return {
        "trace_id": root.trace_id,
        "root": root.name,
        "services": sorted({s.service for s in spans}),
        "spans": len(spans),
        "errors": sum(s.status == "ERROR" for s in spans),
        "start": start / 1e9,
        "duration_ms": round((end - start) / 1e6, 3),
        "task_id": _task_id(spans),
    }


_STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#1d2330}
table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #e3e6ec;
text-align:left;vertical-align:top}code{font-size:12px}.err{color:#b3261e}
.bar{display:inline-block;height:8px;background:#4a7bd0;border-radius:2px}"""


def _page(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    ).encode()


def list_page(store: TraceStore) -> bytes:
    rows = []
    for spans in store.traces()[:200]:
        t = _summary(spans)
        when = time.strftime("%H:%M:%S", time.localtime(t["start"]))
        err = ' class="err"' if t["errors"] else ""
        rows.append(
            f"<tr{err}><td>{when}</td><td><a href='/trace/{t['trace_id']}'>"
            f"<code>{t['trace_id']}</code></a></td><td>{html.escape(t['root'])}</td>"
            f"<td>{html.escape(t['task_id'])}</td><td>{html.escape(', '.join(t['services']))}</td>"
            f"<td>{t['spans']}</td><td>{t['errors']}</td><td>{t['duration_ms']:.1f} ms</td></tr>"
        )
    head = (
        "<tr><th>started</th><th>trace</th><th>root span</th><th>task</th><th>services</th>"
        "<th>spans</th><th>errors</th><th>duration</th></tr>"
    )
    empty = "" if rows else "<p>No traces yet: submit a task.</p>"
    return _page(
        "dtq traces",
        f"<h1>Recent traces</h1>{empty}<table>{head}{''.join(rows)}</table>",
    )


def trace_page(store: TraceStore, trace_id: str) -> bytes | None:
    spans = store.trace(trace_id)
    if not spans:
        return None
    start = min(s.start_ns for s in spans)
    total = max(1, max(s.end_ns for s in spans) - start)
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    for s in spans:
        parent = s.parent_span_id if s.parent_span_id in ids else ""
        children.setdefault(parent, []).append(s)
    rows: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for s in children.get(parent, []):
            offset = 300 * (s.start_ns - start) / total
            width = max(2.0, 300 * (s.end_ns - s.start_ns) / total)
            attrs = "<br>".join(
                f"<code>{html.escape(k)}={html.escape(str(v))}</code>"
                for k, v in sorted(s.attributes.items())
            )
            events = "<br>".join(
                html.escape(f"{name}: {e.get('exception.message', '')}") for name, e in s.events
            )
            err = ' class="err"' if s.status == "ERROR" else ""
            rows.append(
                f"<tr{err}><td style='padding-left:{10 + 18 * depth}px'>{html.escape(s.name)}"
                f"<br><small>{s.kind} · {html.escape(s.service)} · {s.status}</small></td>"
                f"<td><span class=bar style='margin-left:{offset:.0f}px;width:{width:.0f}px'>"
                f"</span><br>{s.duration_ms:.2f} ms</td><td>{attrs}</td><td>{events}</td></tr>"
            )
            walk(s.span_id, depth + 1)

    walk("", 0)
    return _page(
        f"trace {trace_id}",
        f"<p><a href='/'>all traces</a></p><h1>Trace <code>{trace_id}</code></h1>"
        f"<table><tr><th>span</th><th>timeline</th><th>attributes</th><th>events</th></tr>"
        f"{''.join(rows)}</table>",
    )


def _echo(spans: list[Span]) -> None:
    """One line per message span, for the combined log of ``just up``."""
    for s in spans:
        if s.kind in ("PRODUCER", "CONSUMER"):
            task = s.attributes.get("messaging.message.id", "")
            sys.stdout.write(
                f"{s.kind.lower():<8} {s.name:<24} task={task} {s.status.lower()} "
                f"{s.duration_ms:.1f} ms trace={s.trace_id}\n"
            )
    sys.stdout.flush()


def _get(store: TraceStore, path: str) -> tuple[int, bytes, str]:
    """``(status, body, content type)`` of a GET."""
    url = urlsplit(path)
    if url.path == "/":
        return 200, list_page(store), "text/html; charset=utf-8"
    if url.path.startswith("/trace/"):
        page = trace_page(store, url.path.removeprefix("/trace/"))
        if page is None:
            return 404, _page("not found", "<p>No such trace (yet).</p>"), "text/html"
        return 200, page, "text/html; charset=utf-8"
    if url.path == "/api/traces":
        task_id = parse_qs(url.query).get("task_id", [""])[0]
        traces = [
            {**_summary(t), "spans": [asdict(s) for s in t]}
            for t in store.traces()
            if not task_id or any(s.attributes.get("messaging.message.id") == task_id for s in t)
        ]
        return 200, json.dumps({"traces": traces}).encode(), "application/json"
    return 404, b"not found", "text/plain"


def _handler(store: TraceStore, echo: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "dtq-traceview"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            if urlsplit(self.path).path != "/v1/traces" or length < 0:
                self._send(404, b"not found", "text/plain")
                return
            if length > MAX_BODY:
                self._send(413, b"the export is larger than 16 MiB", "text/plain")
                return
            body = self.rfile.read(length)
            if self.headers.get("content-encoding") == "gzip":
                try:
                    body = inflate(body)
                except TooLargeError:
                    self._send(413, b"the export inflates past 16 MiB", "text/plain")
                    return
                except zlib.error:
                    self._send(400, b"the body is not gzip data", "text/plain")
                    return
            request = ExportTraceServiceRequest()
            try:
                request.ParseFromString(body)
            except Exception:
                self._send(400, b"not an OTLP protobuf ExportTraceServiceRequest", "text/plain")
                return
            spans = decode(request)
            store.add(spans)
            if echo:
                _echo(spans)
            self._send(
                200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf"
            )

        def do_GET(self) -> None:
            self._send(*_get(store, self.path))

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def serve(
    store: TraceStore, host: str, ports: list[int], *, echo: bool = False
) -> list[ThreadingHTTPServer]:
    """Serve ``store`` on each of ``ports`` (0 picks a free one) in daemon threads; every port
    takes OTLP exports and serves the view."""
    servers = []
    for port in ports:
        server = ThreadingHTTPServer((host, port), _handler(store, echo))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True, name="traceview").start()
        servers.append(server)
    return servers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4318, help="OTLP/HTTP receiver (4318)")
    parser.add_argument("--ui-port", type=int, default=16686, help="the trace view (16686)")
    parser.add_argument("--max-traces", type=int, default=2000)
    args = parser.parse_args(argv)
    store = TraceStore(args.max_traces)
    servers = serve(store, args.host, [args.port, args.ui_port], echo=True)
    sys.stdout.write(
        f"receiving OTLP on http://{args.host}:{args.port}/v1/traces, "
        f"traces at http://{args.host}:{args.ui_port}/\n"
    )
    sys.stdout.flush()
    stop = threading.Event()
    import signal  # noqa: PLC0415 - only the command needs it

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    for server in servers:
        server.shutdown()


if __name__ == "__main__":
    main()
