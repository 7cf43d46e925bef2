"""API keys and scopes: one guard per scope, on every route under ``/api/v1``.

Keys come from ``DTQ_API_KEYS`` through :mod:`dtq_core.infra.auth` (SHA-256 digests compared in
constant time; a non-ASCII header is simply a wrong key). A request presents its secret as
``Authorization: Bearer <secret>`` or ``X-API-Key: <secret>``, never in the query string.

- no or unknown key: 401 with ``WWW-Authenticate: Bearer``;
- a key without the route's scope: 403 ``forbidden`` (``admin`` implies the others).

With no key configured the API runs in open mode (local development): every request is let in
as the actor ``anonymous``, the start-up log says so loudly and ``dtq_auth_mode{mode="open"}``
is 1. Secrets are never logged; failures are logged with the key's name when one matched.
"""

from __future__ import annotations

from typing import Any

import structlog
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from dtq_core.infra.auth import ApiKey, Scope, authenticate, credentials, parse_api_keys
from dtq_ingest_api.metrics import ApiMetrics
from dtq_ingest_api.problems import ApiError
from dtq_ingest_api.webpolicy import client_address

log = structlog.get_logger()

OPEN_ACTOR = "anonymous"
_ACTOR_KEY = "dtq_actor"
_CHALLENGE = 'Bearer realm="dtq"'


class Authenticator:
    """Checks a request's key against the configured keys and a scope."""

    def __init__(self, api_keys: str, metrics: ApiMetrics) -> None:
        self.keys: tuple[ApiKey, ...] = parse_api_keys(api_keys)
        self.metrics = metrics
        self.open = not self.keys
        metrics.auth_mode.labels(mode="open").set(1 if self.open else 0)
        metrics.auth_mode.labels(mode="keys").set(0 if self.open else 1)

    def check(self, connection: ASGIConnection[Any, Any, Any, Any], scope: Scope) -> str:
        """The actor (the key's name) allowed to call a route of ``scope``.

        Raises:
            ApiError: ``unauthorized`` (401) or ``forbidden`` (403).
        """
        if self.open:
            return OPEN_ACTOR
        headers = connection.headers
        secret = credentials(headers.get("authorization"), headers.get("x-api-key"))
        if secret is None:
            self._fail(connection, "missing", scope)
            raise ApiError(
                "unauthorized",
                "an API key is required: send `Authorization: Bearer <key>` or `X-API-Key`",
                headers={"WWW-Authenticate": _CHALLENGE},
            )
        key = authenticate(self.keys, secret)
        if key is None:
            self._fail(connection, "invalid", scope)
            raise ApiError(
                "unauthorized",
                "the API key is not valid",
                headers={"WWW-Authenticate": f'{_CHALLENGE}, error="invalid_token"'},
            )
        if not key.allows(scope):
            self._fail(connection, "scope", scope, key=key.name)
            raise ApiError(
                "forbidden", f"the key {key.name!r} lacks the {scope.value!r} scope this needs"
            )
        return key.name

    def identify(self, connection: ASGIConnection[Any, Any, Any, Any]) -> ApiKey | None:
        """The presented key, or ``None`` when none is presented (``GET /auth/whoami``).

        Raises:
            ApiError: ``unauthorized`` (401) when a key is presented and unknown.
        """
        headers = connection.headers
        secret = credentials(headers.get("authorization"), headers.get("x-api-key"))
        if secret is None:
            return None
        key = authenticate(self.keys, secret)
        if key is None:
            self._fail(connection, "invalid", Scope.READ)
            raise ApiError(
                "unauthorized",
                "the API key is not valid",
                headers={"WWW-Authenticate": f'{_CHALLENGE}, error="invalid_token"'},
            )
        return key

    def _fail(
        self,
        connection: ASGIConnection[Any, Any, Any, Any],
        reason: str,
        scope: Scope,
        key: str | None = None,
    ) -> None:
        """Count and log a refused attempt, with the caller's address (see
        :func:`dtq_ingest_api.webpolicy.client_address`). Refusals go to the log and the
        metric only, never to the audit stream: anyone who reaches the API can cause them at
        line rate, and in the bounded stream they would push out the entries of real changes."""
        self.metrics.auth_failures.labels(reason=reason).inc()
        log.warning(
            "auth_refused",
            reason=reason,
            scope=scope.value,
            key=key,
            client=client_address(connection.scope),
            method=connection.scope.get("method"),
            path=connection.scope.get("path"),
        )


def require(scope: Scope) -> Guard:
    """The guard of routes that need ``scope``; it records the actor for :func:`actor`."""

    # async on purpose: Litestar runs a sync guard in a worker thread, a thread hop per request.
    async def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        authenticator: Authenticator = connection.app.state.auth
        connection.state[_ACTOR_KEY] = authenticator.check(connection, scope)

    guard.__name__ = f"require_{scope.value}"
    return guard


def actor(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """Who is calling: the key's name (or ``anonymous`` in open mode); the audit's actor."""
    return str(connection.state.get(_ACTOR_KEY, OPEN_ACTOR))


READ = require(Scope.READ)
SUBMIT = require(Scope.SUBMIT)
ADMIN = require(Scope.ADMIN)
