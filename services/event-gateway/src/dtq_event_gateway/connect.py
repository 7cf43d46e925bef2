"""The one connect flow of both transports, from the request to the end of the session.

Order, as docs/events.md states it (end of "Authentication"): access (host, origin, API key),
then the request (filters and cursor; a bad one is refused whatever the load), then admission
(a client slot), then the reader's first contact with Redis, then the session. What differs
between WebSocket and SSE is only how each answer is framed, which a :class:`Transport` says:

| step | WebSocket | SSE |
|---|---|---|
| refused (401, 403, 421, 503) | HTTP response before the upgrade | HTTP response |
| bad request | upgrade, then close 1008 with the short reason | 400 problem+json |
| session ends | close 1013 too slow, 1011 error, 1012 shutdown, 1008/3/9 protocol | end of body |

Both log ``client_connected`` and ``client_disconnected`` (with the same reasons) here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from dtq_event_gateway import access
from dtq_event_gateway.access import Refusal
from dtq_event_gateway.cursor import CursorError
from dtq_event_gateway.filters import FilterError
from dtq_event_gateway.gateway import Gateway
from dtq_event_gateway.session import Session, Sink

log = structlog.get_logger()

BadRequest = FilterError | CursorError


class Transport(Protocol):
    """How one transport frames the steps of :func:`serve`."""

    name: str
    """``ws`` or ``sse``: the ``transport`` of log lines and metrics."""
    ping_s: float | None
    """Keepalive the session sends when idle (``None``: the transport pings by itself)."""
    gone: tuple[type[BaseException], ...]
    """What the writer raises when the client went away (not an error)."""

    def cursor(self, params: dict[str, list[str]]) -> str | None:
        """The cursor the client resumes from."""
        ...

    async def refuse(self, refusal: Refusal) -> None:
        """Answer a refusal before the session starts."""
        ...

    async def reject(self, exc: BadRequest) -> None:
        """Answer a malformed filter or cursor."""
        ...

    async def open(self, params: dict[str, list[str]]) -> Sink:
        """Start the stream (accept the upgrade, send the headers); where frames go."""
        ...

    def watch(self, session: Session) -> Coroutine[Any, Any, Any]:
        """What ends the session from the client's side: returns when the client leaves
        (``None``) or breaks a rule (what :meth:`close` is given)."""
        ...

    async def close(self, ending: Ending) -> str:
        """End the stream as ``ending`` says; returns the reason to log (``disconnected``
        when the client was already gone)."""
        ...


@dataclass(frozen=True, slots=True)
class Ending:
    """How a session ended, before the transport frames it."""

    reason: str
    """``disconnected``, ``slow_consumer`` (the gap was sent), ``dropped_slow_consumer`` (not
    even the gap was taken), ``error``, ``shutdown`` (the gateway drains) or ``protocol``
    (the client broke a rule)."""
    broken_rule: Any = None
    """What :meth:`Transport.watch` returned, for ``protocol``."""


async def serve(scope: dict[str, Any], transport: Transport, gateway: Gateway) -> None:
    """Serve one client: check it, admit it, run its session, log both ends."""
    query_key = access.take_api_key(scope)
    refusal = access.check(gateway.api_keys, scope, query_key, gateway.web_policy)
    if refusal is not None:
        gateway.metrics.refused.labels(refusal.code).inc()
        access.logged(scope, refusal)
        await transport.refuse(refusal)
        return
    params = access.query(scope)
    try:
        request = gateway.parse(params, transport.cursor(params))
    except (FilterError, CursorError) as exc:
        gateway.metrics.refused.labels("bad_request").inc()
        await transport.reject(exc)
        return
    refusal = gateway.admit()
    if refusal is not None:
        await transport.refuse(refusal)
        return
    try:
        refusal = await gateway.wait_started()
        if refusal is not None:
            await transport.refuse(refusal)
            return
        session = Session(
            fanout=gateway.fanout,
            redis=gateway.redis,
            metrics=gateway.metrics,
            flt=request.filter,
            resume=request.resume,
            since_s=request.since_s,
            sink=await transport.open(params),
            limit=gateway.limits.client_buffer,
            ping_s=transport.ping_s,
        )
        started = time.monotonic()
        log.info(
            "client_connected",
            transport=transport.name,
            resumed=session.resume is not None,
            **session.filter.describe(),
        )
        ending = await _run(session, transport, gateway)
        log.info(
            "client_disconnected",
            transport=transport.name,
            reason=await transport.close(ending),
            sent=session.sent,
            seconds=round(time.monotonic() - started, 3),
        )
    finally:
        gateway.release()


async def _run(session: Session, transport: Transport, gateway: Gateway) -> Ending:
    """Run the writer, the client watch and the cut timer until one of them ends (or the
    gateway drains), then stop the others."""
    writer = asyncio.create_task(session.run())
    watch = asyncio.create_task(transport.watch(session))
    cut = asyncio.create_task(session.cut(gateway.limits.cut_grace_s))
    drain = asyncio.create_task(gateway.draining.wait())
    tasks = (writer, watch, cut, drain)
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        return _ending(transport, writer, watch, cut, drain)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _ending(
    transport: Transport,
    writer: asyncio.Task[str],
    watch: asyncio.Task[Any],
    cut: asyncio.Task[None],
    drain: asyncio.Task[Any],
) -> Ending:
    """Which of the session's tasks ended it, and how (checked in this order)."""
    if drain.done():
        return Ending("shutdown")
    if writer.done() and not writer.cancelled():
        return _writer_ending(transport, writer)
    if watch.done() and not watch.cancelled() and watch.exception() is None:
        rule = watch.result()
        return Ending("disconnected") if rule is None else Ending("protocol", rule)
    if cut.done():
        return Ending("dropped_slow_consumer")
    return Ending("disconnected")


def _writer_ending(transport: Transport, writer: asyncio.Task[str]) -> Ending:
    exc = writer.exception()
    if exc is None:
        return Ending(writer.result())  # slow_consumer: the gap was sent
    if isinstance(exc, transport.gone):
        return Ending("disconnected")
    log.error("session_failed", transport=transport.name, exc_info=exc)
    return Ending("error")
