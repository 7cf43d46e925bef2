"""Registering the queues a worker serves in the queue registry (``dtq:queues``)."""

from __future__ import annotations

import asyncio

import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import RETRYABLE
from dtq_worker.context import WorkerContext

log = structlog.get_logger()


async def register_queues(ctx: WorkerContext, *, retry: bool = True) -> bool:
    """Register the queues this worker serves in the queue registry (submits to a queue
    that is not there are refused), up to DTQ_MAX_QUEUES. Its task names travel with
    every heartbeat instead (:mod:`dtq_core.protocol.routing`), so they vanish with the
    worker.

    Tried once before the worker starts; when that fails (Redis away, or full: a new
    registry member is refused under ``maxmemory`` while claims and finishes are not) the
    worker starts anyway and keeps trying in the background, since draining is what frees
    memory. Returns whether the queues are registered.
    """
    backoff = Backoff()
    names = ctx.queue_names
    while True:
        try:
            flags = await ctx.scripts.register_queues(
                ctx.keys.queues, names, ctx.settings.queues.max_queues
            )
        except RETRYABLE as exc:
            delay = backoff.next()
            log.warning(
                "queue_registration_failed",
                error=str(exc),
                retry_in_s=delay,
                starting_anyway=not retry,
            )
            if not retry:
                return False
            await asyncio.sleep(delay)
            continue
        refused = [q for q, ok in zip(names, flags, strict=True) if not ok]
        if refused:
            log.error(
                "queue_registry_full",
                queues=refused,
                limit=ctx.settings.queues.max_queues,
                hint="submits to these queues are refused: delete unused queues or raise "
                "DTQ_MAX_QUEUES",
            )
        return True
