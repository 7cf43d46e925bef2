"""``create_app(settings)``: the Litestar application of the ingest API.

Routes live in ``routes/``; this module mounts them, sets the body limits, the one exception
handler (``problems.handle``), strict body decoding (``body.StrictRequest``), the OpenAPI
document, and wraps every HTTP request with its request id, metrics and one log line.
"""

from __future__ import annotations

import os
import time
from typing import Any, cast

import structlog
from litestar import Litestar, Router
from litestar.datastructures import State
from litestar.di import Provide
from litestar.enums import ScopeType
from litestar.middleware import DefineMiddleware
from litestar.types import (
    LifeSpanReceive,
    LifeSpanScope,
    LifeSpanSend,
    Message,
    Receive,
    Scope,
    Send,
)

from dtq_core.infra import tracing
from dtq_core.infra.log import configure_logging
from dtq_core.infra.runtime import freeze_heap
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.infra.tracing import configure_tracing
from dtq_ingest_api import openapi_config
from dtq_ingest_api.auth import Authenticator
from dtq_ingest_api.body import StrictRequest
from dtq_ingest_api.context import REQUEST_ID_HEADER, new_request_id, set_request_id
from dtq_ingest_api.metrics import ApiMetrics
from dtq_ingest_api.problems import handle
from dtq_ingest_api.protocol import ProblemHttpToolsProtocol
from dtq_ingest_api.routes import auth as auth_routes
from dtq_ingest_api.routes import (
    batches,
    dlq,
    groups,
    health,
    queues,
    schedules,
    stats,
    task_types,
    tasks,
    workers,
    workflows,
)
from dtq_ingest_api.state import lifespan, services
from dtq_ingest_api.webpolicy import WebPolicyMiddleware

log = structlog.get_logger()

API_PREFIX = "/api/v1"

ENVELOPE_BYTES = 16 * 1024
"""Room in a request body for the fields around the payload (names, options, JSON syntax)."""

BATCH_PAYLOADS = 4
"""A batch body may carry this many times DTQ_MAX_PAYLOAD_BYTES, plus an envelope per item."""

LIMIT_CONCURRENCY = 1000
"""Connections and requests served at once; past it uvicorn answers 503 at once instead of
queueing without bound (long-polls hold their connection for up to 60 s)."""

TIMEOUT_KEEP_ALIVE_S = 5
"""Idle keep-alive connections are closed after this (uvicorn's default)."""

GRACEFUL_SHUTDOWN_S = 65
"""On SIGTERM, in-flight requests may finish for this long: a full 60 s long-poll included."""

_QUIET_ROUTES = frozenset({"/health", "/ready", "/metrics"})
_HEADER = REQUEST_ID_HEADER.lower().encode()


def body_limits(settings: Settings) -> tuple[int, int]:
    """The request body limits: one task, and a batch of up to 1000 tasks."""
    single = settings.tasks.max_payload_bytes + ENVELOPE_BYTES
    batch = BATCH_PAYLOADS * settings.tasks.max_payload_bytes + tasks.BATCH_ENVELOPE_BYTES
    return single, batch


class IngestApp(Litestar):
    """The Litestar app, wrapped so that every HTTP request (unmatched ones included) gets a
    request id, a metrics sample and one log line."""

    async def __call__(
        self,
        scope: Scope | LifeSpanScope,
        receive: Receive | LifeSpanReceive,
        send: Send | LifeSpanSend,
    ) -> None:
        if scope["type"] != ScopeType.HTTP:
            await super().__call__(scope, receive, send)
            return
        await self._http(cast(Scope, scope), cast(Receive, receive), cast(Send, send))

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        rid = new_request_id(headers.get(_HEADER, b"").decode("latin-1"))
        set_request_id(rid)
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (_HEADER, rid.encode())],
                }
            await send(message)

        try:
            # Each request runs in a task of its own, with a copy of the context: binding
            # without resetting cannot leak into another request.
            structlog.contextvars.bind_contextvars(request_id=rid)
            # With tracing on, the request's SERVER span (spans.py) is opened inside, from
            # the caller's traceparent; a submit's PRODUCER span is its child.
            await super().__call__(scope, receive, send_with_id)
        finally:
            self._record(scope, status, time.perf_counter() - started, rid)

    def _record(self, scope: Scope, status: int, seconds: float, rid: str) -> None:
        route = str(scope.get("path_template") or "unmatched")
        method = str(scope.get("method", ""))
        self.state.metrics.observe(route, method, status, seconds)
        state: dict[str, Any] = scope.get("state") or {}
        if route in _QUIET_ROUTES and status < 500:
            return
        log.info(
            "request_handled",
            method=method,
            route=route,
            status=status,
            duration_ms=round(seconds * 1000, 2),
            actor=state.get("dtq_actor"),
            request_id=rid,
        )


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the API (``__main__`` and the tests' in-process servers)."""
    return {
        "host": settings.api.host,
        "port": settings.api.port,
        "loop": "uvloop",
        # uvicorn's httptools protocol, with its own refusals as problem+json (protocol.py).
        "http": ProblemHttpToolsProtocol,
        "ws": "none",
        "log_config": None,
        "access_log": False,
        "server_header": False,
        # The client address of log lines: X-Forwarded-For only from these peers.
        "proxy_headers": True,
        "forwarded_allow_ips": settings.api.trusted_proxies,
        "limit_concurrency": LIMIT_CONCURRENCY,
        "timeout_keep_alive": TIMEOUT_KEEP_ALIVE_S,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
    }


def _server_spans() -> list[DefineMiddleware]:
    """The request's SERVER span while tracing is on; nothing otherwise (the instrumentation
    is not even imported: it would add to every start of the API)."""
    if not tracing.is_on():
        return []
    from dtq_ingest_api.spans import server_spans  # noqa: PLC0415 - tracing on only

    return [server_spans()]


def create_app(settings: Settings) -> Litestar:
    """The ingest API for ``settings``; its lifespan owns the Redis client."""
    metrics = ApiMetrics()
    auth = Authenticator(settings.api.keys, metrics)
    single, batch = body_limits(settings)
    api = Router(
        path=API_PREFIX,
        route_handlers=[
            *tasks.HANDLERS,
            *queues.HANDLERS,
            *dlq.HANDLERS,
            *groups.HANDLERS,
            *workers.HANDLERS,
            *schedules.HANDLERS,
            *auth_routes.HANDLERS,
            workflows.get_workflow,
            workflows.cancel_workflow,
            *batches.HANDLERS,
            *task_types.HANDLERS,
            *stats.HANDLERS,
        ],
        security=openapi_config.SECURITY,
        request_max_body_size=single,
    )
    batch_api = Router(
        path=API_PREFIX,
        # /workflows: a workflow's body is a batch's size (its GET shares the path).
        route_handlers=[
            tasks.submit_batch,
            workflows.submit_workflow,
            workflows.list_workflows,
            batches.add_to_batch,
        ],
        security=openapi_config.SECURITY,
        request_max_body_size=batch,
    )
    return IngestApp(
        route_handlers=[api, batch_api, *health.HANDLERS],
        lifespan=[lifespan],
        # uvicorn ends the process by re-raising SIGTERM, past the SDK's exit hook.
        on_shutdown=[tracing.flush],
        dependencies={"svc": Provide(services, sync_to_thread=False)},
        exception_handlers={Exception: handle},
        request_class=StrictRequest,
        middleware=[
            DefineMiddleware(
                WebPolicyMiddleware, policy=settings.web_policy(origins=False), metrics=metrics
            ),
            *_server_spans(),
        ],
        request_max_body_size=single,
        openapi_config=openapi_config.config(),
        logging_config=None,
        debug=False,
        state=State({"settings": settings, "metrics": metrics, "auth": auth}),
    )


def app_from_env() -> Litestar:
    """The app built from ``DTQ_*`` variables: the factory uvicorn's worker processes import
    when ``DTQ_API_WORKERS`` > 1."""
    settings = load_settings(os.environ)
    configure_logging(settings.observability.log_level, settings.observability.log_json)
    configure_tracing("dtq-ingest-api", settings.observability.otlp_endpoint)
    app = create_app(settings)
    freeze_heap()
    return app
