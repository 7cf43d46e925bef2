"""The API's HTTP/1.1 protocol: uvicorn's httptools protocol, with the answers uvicorn gives
on its own (before or around the app) as problem+json like every other error of the API.

uvicorn answers three things without asking the app, as ``text/plain``:

- a request it cannot parse (a bad request line, header name or value, chunk size): 400
  ``Invalid HTTP request received.``, written by the protocol's ``send_400_response``;
- a request past ``limit_concurrency``: 503 ``Service Unavailable``, an ASGI app of its own
  (``flow_control.service_unavailable``) run instead of ours;
- an app that raised before it started a response: 500 ``Internal Server Error``.

The protocol class is uvicorn's documented extension point (``Config(http=<class>)``); this
one overrides the 400 writer and swaps uvicorn's 503 app for :func:`overloaded`. The 500 needs
no override: the app never raises past Litestar's exception handlers (problems.py), which
answer ``internal_error`` problems themselves. Both answers close the connection, as uvicorn's
do. A request that never reaches the protocol (the TCP connection is refused or reset) has no
answer to shape.
"""

from __future__ import annotations

from typing import Any

import structlog
from uvicorn._types import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from dtq_ingest_api.context import REQUEST_ID_HEADER, new_request_id
from dtq_ingest_api.problems import PROBLEM_JSON, problem_body

log = structlog.get_logger()

OVERLOADED_RETRY_AFTER_S = 1
"""Retry-After of a 503 past the concurrency limit: connections free up within a second."""

MALFORMED_DETAIL = (
    "the request is not valid HTTP/1.1: its request line or a header could not be parsed (a"
    " space or control character in the path, a header name or value with invalid characters,"
    " a broken chunk size); nothing was done"
)
OVERLOADED_DETAIL = (
    "the API is serving as many connections and requests as it takes at once; retry after a second"
)

_HEADER = REQUEST_ID_HEADER.lower().encode()


class ProblemHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose own refusals are RFC 9457 problems."""

    def send_400_response(self, msg: str) -> None:
        """A request uvicorn could not parse (``msg`` is uvicorn's fixed text): 400
        ``bad_request``, then the connection closes (the stream cannot be resynchronised)."""
        rid = new_request_id()
        log.warning("request_malformed", request_id=rid, client=_client(self.client))
        body = problem_body("bad_request", MALFORMED_DETAIL, rid)
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head += [
            b"content-type: " + PROBLEM_JSON.encode() + b"\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            _HEADER + b": " + rid.encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        """uvicorn's 503 app, past ``limit_concurrency``, is replaced by :func:`overloaded`."""
        super()._start_asgi_task(cycle, overloaded if app is service_unavailable else app)


async def overloaded(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """503 ``overloaded`` with Retry-After, in place of uvicorn's plain-text answer."""
    rid = new_request_id()
    log.warning("request_refused_overloaded", request_id=rid, path=scope.get("path"))
    body = problem_body(
        "overloaded", OVERLOADED_DETAIL, rid, retry_after_s=OVERLOADED_RETRY_AFTER_S
    )
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", PROBLEM_JSON.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(OVERLOADED_RETRY_AFTER_S).encode()),
        (_HEADER, rid.encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _client(client: Any) -> str | None:
    return f"{client[0]}:{client[1]}" if client else None
