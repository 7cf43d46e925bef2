"""``dtq-event-gateway``: settings -> uvicorn (uvloop) at DTQ_GATEWAY_HOST:DTQ_GATEWAY_PORT."""

from __future__ import annotations

import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from dtq_core.infra.runtime import freeze_heap, listen_socket, startup
from dtq_core.infra.settings import Settings

SERVICE = "dtq-event-gateway"

WS_PING_S = 20.0
"""Protocol-level ping interval, and how long a pong may take before the peer is closed."""
WS_MAX_BYTES = 64 * 1024
"""Frames above this are refused by the protocol layer (close 1009) before they are buffered;
the application allows 4 KiB."""
GRACEFUL_S = 5.0
"""On SIGTERM, how long connections may take to close before uvicorn cancels them."""


def uvicorn_config(app: Any, host: str, port: int, **overrides: Any) -> uvicorn.Config:
    """The server options the gateway runs with (tests start the same config in-process)."""
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "loop": "uvloop",
        "ws": "websockets-sansio",
        "ws_ping_interval": WS_PING_S,
        "ws_ping_timeout": WS_PING_S,
        "ws_max_size": WS_MAX_BYTES,
        # Compression would run once per client for every frame (a fan-out multiplies it)
        # and hides the real byte count from flow control.
        "ws_per_message_deflate": False,
        "lifespan": "on",
        # uvicorn's own lines go through the process's logging set-up (dtq_core.infra.log:
        # JSON with DTQ_LOG_JSON), not through handlers of uvicorn's default configuration.
        "log_config": None,
        # The gateway logs each connection itself; the access log would add a line per
        # request with the query string (cursors are long).
        "access_log": False,
        "server_header": False,
        "timeout_graceful_shutdown": GRACEFUL_S,
    }
    options.update(overrides)
    return uvicorn.Config(app, **options)


class _Server(uvicorn.Server):
    """uvicorn, telling the gateway about SIGTERM before it waits for open connections."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def bind(settings: Settings) -> socket.socket:
    """The gateway's listen socket, at DTQ_GATEWAY_HOST:DTQ_GATEWAY_PORT."""
    return listen_socket(
        settings.gateway.host,
        settings.gateway.port,
        port_setting="DTQ_GATEWAY_PORT",
        host_setting="DTQ_GATEWAY_HOST",
    )


def main() -> None:
    started = startup(SERVICE, bind=bind)
    settings = started.settings
    from dtq_event_gateway.app import create_app  # noqa: PLC0415 - after logging is set up

    app = create_app(settings)
    config = uvicorn_config(app, settings.gateway.host, settings.gateway.port)
    freeze_heap()
    _Server(config, app.state.gateway.drain_soon).run(sockets=[started.listener])


if __name__ == "__main__":
    main()
