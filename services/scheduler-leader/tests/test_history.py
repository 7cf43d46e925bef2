"""The leader's history duty: every stored queue's depth (a partitioned queue's partitions
each in their own slot) is noted in its per-minute history as soon as a replica leads, and the
admin's read adds the partitions up (and the queues, when none is named)."""

from __future__ import annotations

import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.infra.settings import Settings
from dtq_core.ops.admin import Admin, QueueHistory
from dtq_core.protocol.keys import GROUP, Keys
from dtq_devtools.testing import wait_until

from .conftest import MakeReplica


def last_noted(values: list[int | None]) -> int | None:
    """The latest minute's note (the read may fall in the minute after it)."""
    return next((v for v in reversed(values) if v is not None), None)


async def test_the_leader_notes_each_queues_depth_once_it_leads(
    redis: aioredis.Redis, settings: Settings, client: Client, make_replica: MakeReplica
) -> None:
    admin = Admin(client)
    await admin.create_queue("mail")
    await admin.configure("mail", partitions=2)
    for i in range(5):
        # Idempotency keys spread the tasks over both partitions (a jump hash of the key).
        await client.enqueue("t.send", queue="mail", idempotency_key=f"k{i}")
    await client.enqueue("t.send", queue="mail", delay_s=600)
    await client.enqueue("t.other", queue="other")
    mail = Keys(settings.namespace).queue("mail")
    await redis.xreadgroup(GROUP, "probe", {mail.streams[5]: ">"}, count=1)  # one in flight

    leader = await make_replica("a")
    await wait_until(lambda: leader.is_leader, timeout=5, message="leadership")
    await wait_until(lambda: leader.scheduler.history.noted == 3, timeout=5, message="noted")
    history: QueueHistory = await admin.history("1h", "mail")
    assert (last_noted(history.waiting), last_noted(history.in_flight)) == (4, 1)
    assert last_noted(history.delayed) == 1
    everything = await admin.history("1h")
    assert everything.queues == ["mail", "other"]
    assert last_noted(everything.waiting) == 5
    # Each partition noted in its own history, in its own slot.
    for name in ("mail", "mail~1", "other"):
        fields = [
            f
            async for k in redis.scan_iter(match=f"*{{{name}}}:hist:*")
            for f in await redis.hkeys(k)
        ]
        assert any(f.startswith("d") for f in fields), name
