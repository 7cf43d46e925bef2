"""``dtq-ingest-api``: load the settings, then serve the API with uvicorn on uvloop."""

from __future__ import annotations

import os
import sys
import tempfile

import structlog
import uvicorn

from dtq_core.errors import SettingsError
from dtq_core.log import configure_logging
from dtq_core.runtime import freeze_heap
from dtq_core.settings import load_settings
from dtq_core.tracing import configure_tracing
from dtq_ingest_api.app import create_app, server_options
from dtq_ingest_api.metrics import MULTIPROC_ENV

log = structlog.get_logger()


def main() -> None:
    try:
        settings = load_settings(os.environ)
    except SettingsError as exc:
        sys.stderr.write(f"dtq-ingest-api: {exc}\n")
        raise SystemExit(2) from None
    configure_logging(settings.log_level, settings.log_json)
    configure_tracing("dtq-ingest-api", settings.otlp_endpoint)
    log.info(
        "api_starting",
        host=settings.api_host,
        port=settings.api_port,
        workers=settings.api_workers,
    )
    if settings.api_workers > 1:
        # Worker processes build their own app from the environment (validated above), and
        # write their metrics where any of them can add them all up for a scrape.
        with tempfile.TemporaryDirectory(prefix="dtq-api-metrics-") as folder:
            os.environ[MULTIPROC_ENV] = folder
            uvicorn.run(
                "dtq_ingest_api.app:app_from_env",
                factory=True,
                workers=settings.api_workers,
                **server_options(settings),
            )
    else:
        app = create_app(settings)
        freeze_heap()
        uvicorn.run(app, **server_options(settings))


if __name__ == "__main__":
    main()
