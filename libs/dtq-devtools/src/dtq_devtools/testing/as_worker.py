"""Play the worker's part in a test of the client side: claim a queue's tasks and finish them
through the same functions a worker calls, with the client's settings."""

from __future__ import annotations

from dtq_core.client import Client
from dtq_core.protocol.scripts import Claimed, Finish, Held, task_defaults


async def claim(client: Client, queue: str, consumer: str = "w1") -> list[Claimed]:
    """Start up to 100 tasks of ``queue`` as worker ``consumer``."""
    s = client.settings
    _, got = await client.scripts.claim(
        client.queue_keys(queue),
        consumer=consumer,
        count=100,
        events_maxlen=s.events_maxlen,
        retention_ms=s.task_retention_s * 1000,
        defaults=task_defaults(s.max_attempts, s.task_timeout_ms),
    )
    return got


async def finish(
    client: Client, queue: str, claimed: Claimed, outcome: str, payload: str = ""
) -> list[str]:
    """End the attempt ``claimed`` with ``outcome`` (``ok``, ``dead``, ``cancel``, ...) and
    ``payload`` (the result, or the error as JSON); returns the finish function's answer."""
    s = client.settings
    held = Held(claimed.rand, claimed.priority, claimed.entry_id, claimed.lease)
    return await client.scripts.finish(
        client.queue_keys(queue),
        [Finish(held, outcome, payload, "")],
        events_maxlen=s.events_maxlen,
        result_retention_ms=s.result_retention_s * 1000,
        retention_ms=s.task_retention_s * 1000,
        dlq_enabled=s.dlq_enabled,
        dlq_maxlen=s.dlq_maxlen,
    )
