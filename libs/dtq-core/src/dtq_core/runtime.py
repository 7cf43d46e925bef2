"""One way to run a service: settings, logging, uvloop, and SIGTERM/SIGINT as a stop event."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import structlog

from dtq_core.errors import SettingsError
from dtq_core.log import configure_logging
from dtq_core.settings import Settings, load_settings

log = structlog.get_logger()

Main = Callable[[Settings, asyncio.Event], Awaitable[None]]


def freeze_heap() -> None:
    """Move everything allocated so far (modules, the app, the task registry) out of the
    garbage collector's reach.

    Called once a service has started: a full collection under load then walks only what
    requests and tasks allocate, not the whole start-up heap. On the ingest API this took the
    single-submit p99 from 55 ms to 35-40 ms at the same throughput (``just bench``, scenario E).
    """
    gc.collect()
    gc.freeze()


def run_service(name: str, main: Main, **overrides: object) -> None:
    """Load settings, configure logging, and run ``main(settings, stop)`` on uvloop.

    SIGTERM and SIGINT set ``stop``; a second signal exits at once. An invalid setting exits
    with status 2 and a message naming the variable.
    """
    try:
        settings = load_settings(os.environ, **overrides)
    except SettingsError as exc:
        sys.stderr.write(f"{name}: {exc}\n")
        raise SystemExit(2) from None
    configure_logging(settings.log_level, settings.log_json)

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = 0

        def on_signal(signum: int) -> None:
            nonlocal signals
            signals += 1
            if signals > 1:
                log.warning("service_killed", service=name, signal=signal.Signals(signum).name)
                os._exit(1)
            log.info("service_stopping", service=name, signal=signal.Signals(signum).name)
            stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        await main(settings, stop)

    freeze_heap()
    try:
        import uvloop  # noqa: PLC0415 - optional on platforms without it

        uvloop.run(runner())
    except ImportError:
        asyncio.run(runner())
