"""A pub/sub subscription that stays alive: :func:`listen` reads one channel for the life of
the process, across dropped connections, half-open links and cluster failovers.

A subscribed connection only reads, so a half-open one (the far end gone without a FIN or an
RST: a partition, a middlebox that forgot it) would never fail, and the listener would stay
deaf for the life of the process. When the channel is quiet it sends a PING, and a connection
that answers nothing for the socket timeout is dropped and made again.

On a cluster the subscription is on one node (a ``PUBLISH`` reaches every node); after a
failure the cluster's map is read again, so the next subscription goes to a node that serves
now (the failed one may be a master that failed over).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog
from redis.exceptions import TimeoutError as RedisTimeoutError

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.cluster import after_failure, subscriber
from dtq_core.infra.connection import BLOCKING_READ_MS, RETRYABLE, SOCKET_TIMEOUT_S
from dtq_core.infra.loops import raise_if_cancelled

log = structlog.get_logger()

LISTENER_PING = "dtq-listener"
"""The listener's PING payload when its channel is quiet."""


async def listen(
    redis: Any,
    channel: str,
    on_message: Callable[[str], None],
    *,
    on_error: Callable[[Exception], None] = lambda _exc: None,
    on_subscribed: Callable[[], None] = lambda: None,
) -> None:
    """Call ``on_message`` with each message's data on ``channel``, until cancelled.

    Args:
        redis: the client to subscribe with (its blocking client: a subscription holds a
            connection).
        on_error: called with each Redis error before the listener reconnects (metrics).
        on_subscribed: called after each (re)subscription: messages published while it was
            away are lost, so a caller that must not miss one looks again then.
    """
    backoff = Backoff()
    while True:
        raise_if_cancelled()
        try:
            pubsub = await subscriber(redis)
        except RETRYABLE as exc:
            on_error(exc)
            log.debug("listener_reconnecting", channel=channel, error=str(exc))
            await asyncio.sleep(backoff.next())
            continue
        try:
            await pubsub.subscribe(channel)
            backoff.reset()
            on_subscribed()
            heard = time.monotonic()
            while True:
                # The caller ends this loop by cancelling it, and the PING below can swallow
                # that cancellation (redis-py's send on Python 3.11): the listener went on
                # reading, and its owner's stop waited for it forever.
                raise_if_cancelled()
                # Read raw replies: redis-py's message parser cannot read the answer to a
                # PING with a payload on a decoding connection.
                response = await pubsub.parse_response(block=False, timeout=BLOCKING_READ_MS / 1000)
                if response is None:
                    if time.monotonic() - heard > SOCKET_TIMEOUT_S:
                        raise RedisTimeoutError(
                            f"channel {channel} answered nothing for {SOCKET_TIMEOUT_S} s"
                        )
                    await pubsub.ping(LISTENER_PING)
                    continue
                heard = time.monotonic()
                if _is_pong(response):
                    continue
                handle = pubsub.handle_message
                msg = await handle(response, ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                if msg is not None:
                    on_message(str(msg["data"]))
        except RETRYABLE as exc:
            on_error(exc)
            await asyncio.sleep(backoff.next())
            log.debug("listener_reconnecting", channel=channel, error=str(exc))
            after_failure(redis)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]


def _is_pong(response: Any) -> bool:
    """The answer to the listener's PING: its payload (RESP3), or ``pong`` and the payload."""
    if isinstance(response, list):
        return len(response) == 2 and str(response[0]).lower() == "pong"
    return str(response) == LISTENER_PING
