"""Who may connect: API keys (``read`` scope), query parameters, refusals as problem+json.

Keys come as ``Authorization: Bearer``, ``X-API-Key`` or, for browsers (neither
``WebSocket`` nor ``EventSource`` can set headers), ``?api_key=``. The query-string key is
removed from the ASGI scope before anything can log it: uvicorn logs WebSocket requests with
the scope's path and query string.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode

import msgspec
import structlog

from dtq_core.infra.auth import ApiKey, Scope, authenticate, credentials
from dtq_core.infra.origins import WebPolicy, forwarded_scheme, header

log = structlog.get_logger()

API_KEY_PARAM = "api_key"
_ECHO_MAX = 200
"""Longest header value a log line repeats: they are the sender's text."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a connection is refused, as an HTTP status and a stable code."""

    status: int
    code: str
    detail: str

    @property
    def body(self) -> bytes:
        """RFC 9457 problem+json, like the ingest API's errors."""
        return msgspec.json.encode(
            {
                "type": "about:blank",
                "title": HTTPStatus(self.status).phrase,
                "status": self.status,
                "detail": self.detail,
                "code": self.code,
            }
        )

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/problem+json")]
        if self.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="dtq"'))
        if self.status == 503:
            headers.append((b"retry-after", b"1"))
        return headers


def take_api_key(scope: Any) -> str | None:
    """Remove ``api_key`` from ``scope["query_string"]`` and return its value."""
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return None
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    found = [value for name, value in pairs if name == API_KEY_PARAM]
    if not found:
        return None
    kept = [(name, value) for name, value in pairs if name != API_KEY_PARAM]
    scope["query_string"] = urlencode(kept).encode("ascii")
    return found[-1]


def query(scope: Any) -> dict[str, list[str]]:
    raw: bytes = scope.get("query_string", b"")
    return parse_qs(raw.decode("latin-1"))


def last(params: dict[str, list[str]], name: str) -> str | None:
    """The last value of query parameter ``name``."""
    values = params.get(name)
    return values[-1] if values else None


def origin_refusal(scope: Any, policy: WebPolicy) -> Refusal | None:
    """Refuse a request for a Host the gateway does not serve (DNS rebinding) and a browser
    request from a foreign origin (cross-site WebSocket hijacking: a page elsewhere opening the
    stream with the visitor's network position or key).

    Allowed origins: none (not a browser), the origin the request was sent to (scheme, host
    and port: the dashboard behind the same nginx, which passes the browser's Host and scheme),
    and those of ``DTQ_GATEWAY_ALLOWED_ORIGINS`` (``*`` for any). The rules are
    :mod:`dtq_core.infra.origins`, shared with the ingest API.
    """
    host = header(scope, b"host")
    if not policy.host_allowed(host):
        return Refusal(
            421,
            "host_not_allowed",
            f"the gateway does not serve the host {host!r}: add it to DTQ_ALLOWED_HOSTS",
        )
    origin = header(scope, b"origin")
    scheme = forwarded_scheme(header(scope, b"x-forwarded-proto"), str(scope.get("scheme")))
    if policy.origin_allowed(origin, scheme, host):
        return None
    return Refusal(
        403,
        "forbidden_origin",
        f"origin {origin!r} may not read events: add it to DTQ_GATEWAY_ALLOWED_ORIGINS",
    )


def logged(scope: Any, refusal: Refusal) -> None:
    """The warning line of a refused connection, with the client's address (the peer's, or
    X-Forwarded-For's when uvicorn trusts the peer as a proxy). Never the key."""
    client = scope.get("client")
    log.warning(
        "connection_refused",
        code=refusal.code,
        status=refusal.status,
        client=str(client[0]) if client else None,
        path=str(scope.get("path", ""))[:_ECHO_MAX],
        host=(header(scope, b"host") or "")[:_ECHO_MAX],
        origin=(header(scope, b"origin") or "")[:_ECHO_MAX] or None,
    )


def check(
    keys: tuple[ApiKey, ...], scope: Any, query_key: str | None, policy: WebPolicy
) -> Refusal | None:
    """``None`` when the request may read events, else the refusal."""
    refusal = origin_refusal(scope, policy)
    if refusal is not None or not keys:
        return refusal
    presented = credentials(header(scope, b"authorization"), header(scope, b"x-api-key"))
    key = authenticate(keys, presented or query_key)
    if key is None:
        return Refusal(
            401,
            "unauthorized",
            "an API key with the read scope is required: Authorization: Bearer <key>, "
            "X-API-Key, or ?api_key= for browsers",
        )
    if not key.allows(Scope.READ):
        return Refusal(403, "forbidden", f"API key {key.name!r} lacks the read scope")
    return None
