"""One way to start every dtq process: settings, listen socket and logging (:func:`startup`),
then, for the asyncio services, uvloop and SIGTERM/SIGINT as a stop event (:func:`run_service`)."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from dtq_core.errors import SettingsError
from dtq_core.infra.log import configure_logging
from dtq_core.infra.settings import Settings, exit_on_settings_error, settings_or_exit

log = structlog.get_logger()

Main = Callable[[Settings, asyncio.Event], Awaitable[None]]
Bind = Callable[[Settings], socket.socket]
"""Binds the process's listen socket from its settings (:func:`listen_socket`)."""


@dataclass(frozen=True, slots=True)
class Started:
    """What :func:`startup` prepared: the settings, and the bound socket when one was asked."""

    settings: Settings
    sock: socket.socket | None = None

    @property
    def listener(self) -> socket.socket:
        """The bound socket of an entry point that asked for one (``bind``)."""
        if self.sock is None:
            raise RuntimeError("startup() was not asked to bind a socket")
        return self.sock


def startup(
    program: str,
    *,
    bind: Bind | None = None,
    log_level: str | None = None,
    **overrides: Any,
) -> Started:
    """The prologue of every entry point: load the settings, bind the listen socket, and
    configure logging, in that order, so that nothing is logged before the configuration is
    known to be runnable.

    An invalid setting, or a socket that cannot be bound (a port in use), exits with status 2
    and one line ``<program>: <what to change>`` on stderr, the same from every entry point.

    Args:
        program: the name the one-line errors start with (``dtq-worker``).
        bind: binds the listen socket, e.g. ``lambda s: listen_socket(s.api.host, ...)``.
        log_level: instead of ``DTQ_LOG_LEVEL`` (the CLI logs warnings only: log lines would
            interleave with its output).
        overrides: settings that win over the environment (command-line options).
    """
    settings = settings_or_exit(program, **overrides)
    sock = None
    if bind is not None:
        with exit_on_settings_error(program):
            sock = bind(settings)
    configure_logging(
        log_level or settings.observability.log_level, settings.observability.log_json
    )
    return Started(settings, sock)


def freeze_heap() -> None:
    """Move everything allocated so far (modules, the app, the task registry) out of the
    garbage collector's reach.

    Called once a service has started: a full collection under load then walks only what
    requests and tasks allocate, not the whole start-up heap. On the ingest API this took the
    single-submit p99 from 55 ms to 35-40 ms at the same throughput (``just bench``, scenario E).
    """
    gc.collect()
    gc.freeze()


def run_service(name: str, main: Main, **overrides: Any) -> None:
    """Load settings, configure logging, and run ``main(settings, stop)`` on uvloop.

    SIGTERM and SIGINT set ``stop``; a second signal exits at once. An invalid setting, or a
    :class:`SettingsError` ``main`` raises while it starts (a port in use), exits with status
    2 and one line naming the variable to change.
    """
    settings = startup(name, **overrides).settings

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
    with exit_on_settings_error(name):
        try:
            import uvloop  # noqa: PLC0415 - optional on platforms without it
        except ImportError:
            asyncio.run(runner())
        else:
            uvloop.run(runner())


def listen_error(
    exc: OSError,
    host: str,
    port: int,
    *,
    port_setting: str,
    host_setting: str,
    what: str = "port",
    can_turn_off: bool = False,
) -> SettingsError:
    """What to change when a listener cannot bind ``host:port``, as one line.

    The usual case is a second copy of a service next to a running stack: the message names
    the setting that moves it (the default ports are fixed, so the copy collides).
    """
    if exc.errno == errno.EADDRINUSE:
        text = f"{what} {port} is in use; set {port_setting} to a free port"
        if can_turn_off:
            text += ", or 0 to turn the listener off"
        return SettingsError(text, variable=port_setting)
    reason = exc.strerror or str(exc)
    return SettingsError(
        f"cannot listen on {host}:{port} ({reason}); check {host_setting} and {port_setting}",
        variable=host_setting,
    )


def listen_socket(host: str, port: int, *, port_setting: str, host_setting: str) -> socket.socket:
    """A TCP socket bound to ``host:port`` the way uvicorn binds one, for ``server.run``.

    Binding here rather than inside uvicorn turns a port in use into :func:`listen_error`'s
    one line (uvicorn logs the errno and exits 3, naming no setting).

    Raises:
        SettingsError: from :func:`listen_error`.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # in use, an address not on this host, a name that does not resolve
        sock.close()
        raise listen_error(
            exc, host, port, port_setting=port_setting, host_setting=host_setting
        ) from None
    sock.set_inheritable(True)  # uvicorn's worker processes serve the same socket
    return sock
