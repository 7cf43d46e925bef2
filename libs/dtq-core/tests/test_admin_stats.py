"""Queue statistics (``dtq_core.ops.admin.stats``) against a real redis-server: depth, in flight,
delayed, dead and the oldest waiting age, also when the group's lag is unknown."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.errors import (
    QueueFullError,
)
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import TaskStatus
from dtq_core.names import make_task_id
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.lifecycle import claim, finish, redis_ms


async def test_queue_stats_follow_tasks_from_queued_to_running_to_dead(client: Client) -> None:
    admin = Admin(client)
    await client.enqueue_many(
        [{"task": "t.a", "queue": "emails", "priority": 9} for _ in range(3)]
        + [{"task": "t.a", "queue": "emails", "priority": 1} for _ in range(2)]
    )
    await client.enqueue("t.later", queue="emails", delay_s=300)
    await client.enqueue("t.b", queue="other")

    stats = await admin.queue("emails")
    assert stats.name == "emails"
    assert not stats.paused
    assert stats.depth == 5
    assert stats.depth_by_priority == {str(p): {9: 3, 1: 2}.get(p, 0) for p in range(10)}
    assert (stats.delayed, stats.in_flight, stats.dead) == (1, 0, 0)
    assert stats.oldest_waiting_age_s is not None
    assert stats.oldest_waiting_age_s >= 0

    got = await claim(client, "emails", 2)
    assert [c.priority for c in got] == [9, 9]
    stats = await admin.queue("emails")
    assert (stats.depth, stats.depth_by_priority["9"], stats.in_flight) == (3, 1, 2)
    # Delivered entries stay in the stream until it is trimmed: its length is not the depth.
    assert await client.redis.xlen(client.queue_keys("emails").streams[9]) == 3

    await finish(client, "emails", got[:1], "ok")
    await finish(client, "emails", got[1:], "dead")
    stats = await admin.queue("emails")
    assert (stats.depth, stats.in_flight, stats.dead, stats.delayed) == (3, 0, 1, 1)
    assert stats.depth_by_priority == {str(p): {9: 1, 1: 2}.get(p, 0) for p in range(10)}

    everything = await admin.queues()
    assert [q.name for q in everything] == ["emails", "other"]
    assert everything[1].depth == 1
    assert everything[1].depth_by_priority["5"] == 1


async def lag_unknown(client: Client, queue: str, *, pause: bool) -> None:
    """Leave ``queue``'s p5 group with an unknown lag: one task running (its entry delivered,
    still in the stream), the entry after it deleted by a claim (its task was cancelled), and
    one queued task after that. ``XLEN`` is then 2 while one task waits."""
    first = await client.enqueue("t.a", queue=queue)
    cancelled = await client.enqueue("t.a", queue=queue)
    assert await cancelled.cancel() == TaskStatus.CANCELLED
    assert [make_task_id(queue, c.rand) for c in await claim(client, queue, 2)] == [first.id]
    await client.enqueue("t.a", queue=queue)
    if pause:
        await Admin(client).pause(queue)
    stream = client.queue_keys(queue).streams[5]
    (group,) = await client.redis.xinfo_groups(stream)
    assert group["lag"] is None
    assert await client.redis.xlen(stream) == 2


async def test_depth_is_exact_when_the_groups_lag_is_unknown(client: Client) -> None:
    await lag_unknown(client, "q", pause=True)
    await client.enqueue("t.later", queue="q", delay_s=300)
    stats = await Admin(client).queue("q")
    assert (stats.depth, stats.depth_by_priority["5"], stats.delayed) == (1, 1, 1)
    assert (stats.in_flight, stats.paused) == (1, True)
    assert stats.oldest_waiting_age_s is not None
    # More undelivered entries than one page of the count.
    await client.enqueue_many([{"task": "t.a", "queue": "q"} for _ in range(1500)])
    assert (await Admin(client).queue("q")).depth == 1501


async def test_admission_counts_exactly_when_the_groups_lag_is_unknown(
    redis: aioredis.Redis, settings: Settings
) -> None:
    client = Client(
        redis,
        load_settings(
            {}, redis_url=settings.redis.url, max_queue_depth=3, reject_unknown_queues=False
        ),
    )
    await lag_unknown(client, "q", pause=False)  # 1 running, 1 queued; XLEN says 2
    await client.enqueue("t", queue="q", delay_s=30)
    await client.enqueue("t", queue="q")  # the third waiting task: XLEN would say four
    with pytest.raises(QueueFullError):
        await client.enqueue("t", queue="q")


async def test_oldest_waiting_age_is_that_of_the_first_undelivered_entry(client: Client) -> None:
    admin = Admin(client)
    first = await client.enqueue("t.a", queue="q", priority=4)
    ((entry_id, _),) = await client.redis.xrange(client.queue_keys("q").streams[4])
    first_ms = int(entry_id.partition("-")[0])

    async def later() -> bool:
        return await redis_ms(client) >= first_ms + 50

    await wait_until(later, message="Redis time 50 ms past the first entry")
    await client.enqueue("t.a", queue="q", priority=4)
    entries = await client.redis.xrange(client.queue_keys("q").streams[4])
    second_ms = int(entries[1][0].partition("-")[0])
    (started,) = await claim(client, "q", 1)
    assert make_task_id("q", started.rand) == first.id

    before = await redis_ms(client)
    age = (await admin.queue("q")).oldest_waiting_age_s
    after = await redis_ms(client)
    assert age is not None
    assert (before - second_ms) / 1000 <= age <= (after - second_ms) / 1000

    await claim(client, "q", 1)
    assert (await admin.queue("q")).oldest_waiting_age_s is None
