"""What one gateway process shares between its connections: reader, Redis, limits, metrics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import structlog

from dtq_core.infra.auth import parse_api_keys
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings
from dtq_event_gateway import cursor as cursors
from dtq_event_gateway.access import Refusal
from dtq_event_gateway.cursor import Position
from dtq_event_gateway.fanout import Fanout
from dtq_event_gateway.filters import EventFilter, FilterError, parse_filter
from dtq_event_gateway.metrics import GatewayMetrics

log = structlog.get_logger()

MAX_CLIENTS = 1000
"""Connections per process (failure mode D1, docs/failure-modes.md); more are refused with
503. Scale out with replicas: they share nothing but Redis."""

CLIENT_BUFFER = 1000
"""Events queued per client before it counts as too slow. Frames are shared between clients,
so a full queue costs about 1000 references, not 1000 encoded frames."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-process knobs (constants today; see docs/events.md)."""

    max_clients: int = MAX_CLIENTS
    client_buffer: int = CLIENT_BUFFER
    sse_ping_s: float = 15.0
    """An SSE comment line this often when no event was sent (proxies close idle streams)."""
    cut_grace_s: float = 5.0
    """A too-slow client whose socket takes not even the gap message is dropped after this."""
    start_timeout_s: float = 5.0
    """How long a new connection waits for the reader's first contact with Redis."""


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed subscription request."""

    filter: EventFilter
    resume: dict[str, Position] | None
    since_s: int | None = None
    """Without a cursor: start this many seconds back instead of live (``?since_s=``)."""


class Gateway:
    def __init__(self, settings: Settings, limits: Limits) -> None:
        self.settings = settings
        self.limits = limits
        self.api_keys = parse_api_keys(settings.api.keys)
        self.web_policy = settings.web_policy(origins=True)
        self.metrics = GatewayMetrics()
        self.fanout = Fanout(settings, self.metrics)
        self.redis = connect(settings, client_name="dtq-event-gateway")
        self.metrics.watch_clients(self.fanout.count)
        self.clients = 0
        self.draining = asyncio.Event()
        """Set on SIGTERM: SSE streams end at once (uvicorn closes WebSockets with 1012)."""
        self._reader: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def drain_soon(self) -> None:
        """Start draining; safe to call from a signal handler."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.draining.set)

    def start(self) -> None:
        if not self.api_keys:
            log.warning(
                "auth_disabled",
                detail="DTQ_API_KEYS is empty: every client may read every event without a "
                "key. Local development only; set DTQ_API_KEYS in any shared deployment.",
            )
        self._loop = asyncio.get_running_loop()
        self._reader = asyncio.create_task(self.fanout.run(), name="dtq-gateway-reader")
        self._reader.add_done_callback(self._reader_done)

    @staticmethod
    def _reader_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("gateway_reader_crashed", exc_info=task.exception())

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self.fanout.aclose()
        await self.redis.aclose()

    @property
    def reading(self) -> bool:
        """The reader runs and its last Redis call worked."""
        return (
            self._reader is not None
            and not self._reader.done()
            and self.fanout.started.is_set()
            and not self.fanout.degraded
        )

    def admit(self) -> Refusal | None:
        """Take a client slot (give it back with :meth:`release`), or refuse."""
        if self.clients >= self.limits.max_clients:
            self.metrics.refused.labels("limit").inc()
            return Refusal(
                503,
                "too_many_clients",
                f"this gateway serves at most {self.limits.max_clients} clients; retry, "
                "or connect to another replica",
            )
        self.clients += 1
        return None

    def release(self) -> None:
        self.clients -= 1

    async def wait_started(self) -> Refusal | None:
        try:
            async with asyncio.timeout(self.limits.start_timeout_s):
                await self.fanout.started.wait()
        except TimeoutError:
            self.metrics.refused.labels("unavailable").inc()
            return Refusal(503, "redis_unavailable", "the gateway cannot reach Redis yet")
        return None

    def parse(self, params: Mapping[str, Sequence[str]], cursor: str | None) -> Request:
        """The subscription a request asks for.

        Raises:
            FilterError, CursorError: what is wrong, in words a person can act on.
        """
        flt = parse_filter(params)
        resume = cursors.decode(cursor) if cursor else None
        since = params.get("since_s")
        # A cursor wins: a client reconnecting to its original URL continues where it was.
        return Request(flt, resume, None if since is None or resume else parse_since(since[-1]))


MAX_SINCE_S = 3600
"""The furthest back ``?since_s=`` reaches; the streams keep about DTQ_EVENTS_MAXLEN events per
queue anyway, and a longer replay is a slower connect."""


def parse_since(value: str) -> int:
    """``?since_s=``: whole seconds from 1 to :data:`MAX_SINCE_S`.

    Raises:
        FilterError: anything else.
    """
    if not value.isdigit() or not 1 <= int(value) <= MAX_SINCE_S:
        raise FilterError(
            f"since_s: {value[:20]!r} is not a number of seconds from 1 to {MAX_SINCE_S}"
        )
    return int(value)
