"""A change and the writes that go with it, on every topology.

On one Redis (standalone, or the master a Sentinel set names) a change and its companions are
one ``MULTI``/``EXEC``: Redis applies all of them or none. A Redis Cluster runs no transaction
across two slots, and the companions of dtq's changes are global keys in slots of their own
(the audit stream ``dtq:audit``, a schedule's watermark hash). There the change, whose keys
share one slot, is one ``MULTI``/``EXEC``, and its companions are written right after it: a
failure between the two (a dropped connection, a refused write) leaves the change made
without them, and the caller gets the error (docs/architecture.md, "Redis Cluster").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from dtq_core.infra.cluster import is_cluster

Write = Callable[[Pipeline], Awaitable[Any]]
"""Queues one command on the pipeline it is given (a transaction's, or the one that follows
it on a cluster)."""


async def execute_with(pipe: Pipeline, redis: aioredis.Redis, then: Sequence[Write]) -> list[Any]:
    """Execute the transaction queued in ``pipe`` and the writes ``then``: in the same
    transaction on one Redis, right after it on a cluster (in one round trip per master).

    Args:
        pipe: a transaction pipeline of ``redis`` holding the change (its keys of one slot).
        redis: the client ``pipe`` belongs to.
        then: the companions of the change, one command each, on keys outside its slot.

    Returns:
        The replies of the change's own commands (not of ``then``).
    """
    if not is_cluster(redis):
        for write in then:
            await write(pipe)
        replies = await pipe.execute()
        return list(replies[: len(replies) - len(then)])
    replies = await pipe.execute()
    if then:
        async with redis.pipeline(transaction=False) as after:
            for write in then:
                await write(after)
            await after.execute()
    return list(replies)
