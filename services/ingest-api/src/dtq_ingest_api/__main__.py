"""``dtq-ingest-api``: load the settings, then serve the API with uvicorn on uvloop."""

from __future__ import annotations

import os
import socket
import tempfile

import structlog
import uvicorn
from uvicorn.supervisors import Multiprocess

from dtq_core.infra.runtime import freeze_heap, listen_socket, startup
from dtq_core.infra.settings import Settings, exit_on_settings_error
from dtq_core.infra.tracing import configure_tracing
from dtq_ingest_api.app import create_app, server_options
from dtq_ingest_api.metrics import MULTIPROC_ENV

log = structlog.get_logger()

SERVICE = "dtq-ingest-api"
STARTUP_FAILURE = 3
"""uvicorn's exit status when the app did not start (its lifespan failed)."""


def bind(settings: Settings) -> socket.socket:
    """The API's listen socket, at DTQ_API_HOST:DTQ_API_PORT."""
    return listen_socket(
        settings.api.host,
        settings.api.port,
        port_setting="DTQ_API_PORT",
        host_setting="DTQ_API_HOST",
    )


def main() -> None:
    started = startup(SERVICE, bind=bind)
    settings, sock = started.settings, started.listener
    with exit_on_settings_error(SERVICE):
        # An OTEL_* variable the exporter would fail on is one line, like a DTQ_* setting.
        configure_tracing(SERVICE, settings.observability.otlp_endpoint)
    log.info(
        "api_starting",
        host=settings.api.host,
        port=settings.api.port,
        workers=settings.api.workers,
    )
    if settings.api.workers > 1:
        # Worker processes build their own app from the environment (validated above), and
        # write their metrics where any of them can add them all up for a scrape.
        with tempfile.TemporaryDirectory(prefix="dtq-api-metrics-") as folder:
            os.environ[MULTIPROC_ENV] = folder
            config = uvicorn.Config(
                "dtq_ingest_api.app:app_from_env",
                factory=True,
                workers=settings.api.workers,
                **server_options(settings),
            )
            Multiprocess(config, sockets=[sock]).run()
    else:
        app = create_app(settings)
        freeze_heap()
        server = uvicorn.Server(uvicorn.Config(app, **server_options(settings)))
        server.run(sockets=[sock])
        if not server.started:
            raise SystemExit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()
