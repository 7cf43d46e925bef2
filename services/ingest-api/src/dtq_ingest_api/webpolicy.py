"""The API's answer to foreign web pages: a Host it does not serve, a cross-site write.

Runs before authentication on every route, so open mode is covered too. The rules live in
:mod:`dtq_core.origins` (the event gateway applies the same ones):

- a ``Host`` that names none of the API's names (DNS rebinding): 421 ``host_not_allowed``;
- ``POST``/``PUT``/``PATCH``/``DELETE`` with a foreign ``Origin`` or ``Sec-Fetch-Site:
  cross-site``: 403 ``forbidden_origin``. ``GET`` needs no check: the API sends no CORS
  headers, so a foreign page cannot read an answer, and reads change nothing.
"""

from __future__ import annotations

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

from dtq_core.origins import UNSAFE_METHODS, WebPolicy, forwarded_scheme
from dtq_ingest_api.problems import ApiError


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def refusal(policy: WebPolicy, scope: Scope) -> ApiError | None:
    """Why a browser request may not be served, or ``None``."""
    host = _header(scope, b"host")
    if not policy.host_allowed(host):
        return ApiError(
            "host_not_allowed",
            f"this API does not serve the host {host!r}: add it to DTQ_ALLOWED_HOSTS if "
            "browsers reach the API by that name",
        )
    if str(scope.get("method", "")) not in UNSAFE_METHODS:
        return None
    origin = _header(scope, b"origin")
    if policy.cross_site(_header(scope, b"sec-fetch-site"), origin):
        return ApiError("forbidden_origin", "a page on another site may not change anything here")
    scheme = forwarded_scheme(_header(scope, b"x-forwarded-proto"), str(scope.get("scheme")))
    if not policy.origin_allowed(origin, scheme, host):
        return ApiError(
            "forbidden_origin",
            f"a page on origin {origin!r} may not change anything here: only the API's own "
            "origin may send POST, PUT, PATCH or DELETE",
        )
    return None


class WebPolicyMiddleware:
    """ASGI middleware that raises the :func:`refusal` of a request (``problems.handle``
    answers it as problem+json)."""

    def __init__(self, app: ASGIApp, policy: WebPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            error = refusal(self.policy, scope)
            if error is not None:
                raise error
        await self.app(scope, receive, send)
