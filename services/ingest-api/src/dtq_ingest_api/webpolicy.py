"""The API's answer to foreign web pages: a Host it does not serve, a cross-site write.

Runs before authentication on every route, so open mode is covered too. The rules live in
:mod:`dtq_core.infra.origins` (the event gateway applies the same ones):

- a ``Host`` that names none of the API's names (DNS rebinding): 421 ``host_not_allowed``;
- ``POST``/``PUT``/``PATCH``/``DELETE`` with a foreign ``Origin`` or ``Sec-Fetch-Site:
  cross-site``: 403 ``forbidden_origin``. ``GET`` needs no check: the API sends no CORS
  headers, so a foreign page cannot read an answer, and reads change nothing.
"""

from __future__ import annotations

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

from dtq_core.infra.origins import UNSAFE_METHODS, WebPolicy, forwarded_scheme, header
from dtq_ingest_api.metrics import ApiMetrics
from dtq_ingest_api.problems import ApiError

log = structlog.get_logger()

_REASONS = {"host_not_allowed": "host", "forbidden_origin": "origin"}
_ECHO_MAX = 200
"""Longest header value a log line repeats: they are the sender's text."""


def _echo(value: str | None) -> str:
    return (value or "")[:_ECHO_MAX]


def client_address(scope: Scope) -> str | None:
    """The caller's address: uvicorn puts X-Forwarded-For's there only when the peer is in
    DTQ_API_TRUSTED_PROXIES, else it is the peer's own."""
    client = scope.get("client")
    return str(client[0]) if client else None


def refusal(policy: WebPolicy, scope: Scope) -> ApiError | None:
    """Why a browser request may not be served, or ``None``."""
    host = header(scope, b"host")
    if not policy.host_allowed(host):
        return ApiError(
            "host_not_allowed",
            f"this API does not serve the host {_echo(host)!r}: add it to "
            "DTQ_ALLOWED_HOSTS if browsers reach the API by that name",
        )
    if str(scope.get("method", "")) not in UNSAFE_METHODS:
        return None
    origin = header(scope, b"origin")
    if policy.cross_site(header(scope, b"sec-fetch-site"), origin):
        return ApiError("forbidden_origin", "a page on another site may not change anything here")
    scheme = forwarded_scheme(header(scope, b"x-forwarded-proto"), str(scope.get("scheme")))
    if not policy.origin_allowed(origin, scheme, host):
        return ApiError(
            "forbidden_origin",
            f"a page on origin {_echo(origin)!r} may not change anything here: only the "
            "API's own origin may send POST, PUT, PATCH or DELETE",
        )
    return None


class WebPolicyMiddleware:
    """ASGI middleware that raises the :func:`refusal` of a request (``problems.handle``
    answers it as problem+json)."""

    def __init__(self, app: ASGIApp, policy: WebPolicy, metrics: ApiMetrics) -> None:
        self.app = app
        self.policy = policy
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            error = refusal(self.policy, scope)
            if error is not None:
                self._refused(scope, error)
                raise error
        await self.app(scope, receive, send)

    def _refused(self, scope: Scope, error: ApiError) -> None:
        reason = _REASONS[error.code]
        self.metrics.auth_failures.labels(reason=reason).inc()
        log.warning(
            "request_refused",
            reason=reason,
            client=client_address(scope),
            method=scope.get("method"),
            path=str(scope.get("path", ""))[:_ECHO_MAX],
            host=_echo(header(scope, b"host")),
            origin=_echo(header(scope, b"origin")) or None,
        )
