"""``create_app(settings)``: the event gateway as a Litestar application.

Routes: the WebSocket endpoint at ``DTQ_WS_PATH`` (``/ws/events``), ``GET /sse/events``,
``GET /health`` (the process lives), ``GET /ready`` (the reader's last Redis call worked) and
``GET /metrics``. The lifespan owns the reader task and the Redis clients.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, MediaType, Response, WebSocket, asgi, get, websocket
from litestar.types import Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dtq_core.infra.settings import Settings
from dtq_event_gateway import sse
from dtq_event_gateway import websocket as ws
from dtq_event_gateway.gateway import Gateway, Limits

SSE_PATH = "/sse/events"


def create_app(settings: Settings, limits: Limits | None = None, **overrides: Any) -> Litestar:
    """The gateway for ``settings``.

    Args:
        settings: the process's settings (Redis, namespace, API keys, WebSocket path).
        limits: per-process limits; keyword ``overrides`` replace single fields of the
            defaults (tests use ``client_buffer=5``).
    """
    if limits is None:
        overrides.setdefault("max_clients", settings.gateway.max_clients)
        overrides.setdefault("client_buffer", settings.gateway.client_buffer)
        limits = Limits(**overrides)
    gateway = Gateway(settings, limits)

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    @websocket(settings.gateway.ws_path)
    async def events_ws(socket: WebSocket[Any, Any, Any]) -> None:
        await ws.serve(socket, gateway)

    # copy_scope=False: the handler removes ?api_key= from the scope that uvicorn logs from.
    @asgi(SSE_PATH, copy_scope=False)
    async def events_sse(scope: Scope, receive: Receive, send: Send) -> None:
        await sse.serve(scope, receive, send, gateway)

    @get("/health", sync_to_thread=False)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @get("/ready")
    async def ready() -> Response[dict[str, str]]:
        if not gateway.reading:
            return Response(
                {"status": "unavailable", "detail": "not reading Redis"}, status_code=503
            )
        return Response({"status": "ready"})

    @get("/metrics", sync_to_thread=False)
    def metrics() -> Response[bytes]:
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app = Litestar(
        route_handlers=[events_ws, events_sse, health, ready, metrics],
        lifespan=[lifespan],
        openapi_config=None,
        logging_config=None,
    )
    app.state.gateway = gateway
    return app


__all__ = ["SSE_PATH", "MediaType", "create_app"]
