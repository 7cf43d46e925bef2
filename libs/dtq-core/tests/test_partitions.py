"""Partitioned queues (``dtq_core.partitions``, ``Admin.configure``) against a real Redis: a
queue grows and never shrinks, tasks spread over its partitions, a replay finds its task after
a growth, and statistics, pause, purge, the DLQ and delete act on the whole queue."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from dtq_core.client import Client
from dtq_core.errors import QueueLimitError, ValidationError
from dtq_core.messages import TaskStatus
from dtq_core.names import logical_queue, split_partition, split_task_id
from dtq_core.ops.admin import Admin
from dtq_core.partitions import Layout, jump_hash
from dtq_core.protocol.scripts import Claimed
from dtq_devtools.testing.lifecycle import audit_entries, finish, status


def partition_of(task_id: str) -> int:
    stored, _ = split_task_id(task_id) or ("", "")
    return (split_partition(stored) or ("", -1))[1]


def test_a_growth_moves_a_key_only_to_a_new_partition_and_spreads_evenly() -> None:
    rng = random.Random(7)
    keys = [rng.getrandbits(64) for _ in range(4000)]
    for before, after in ((1, 2), (3, 8), (8, 9), (16, 64)):
        for key in keys:
            old, new = jump_hash(key, before), jump_hash(key, after)
            assert new == old or new >= before
    spread = Counter(jump_hash(k, 8) for k in keys)
    assert set(spread) == set(range(8))
    assert max(spread.values()) < 1.25 * len(keys) / 8


def test_the_counts_of_the_idempotency_window_are_those_that_held_in_it() -> None:
    layout = Layout(8, ((4, 1000), (8, 2000)))
    assert layout.counts_since(500) == {1, 4, 8}
    assert layout.counts_since(1500) == {4, 8}
    assert layout.counts_since(2500) == {8}
    assert Layout().counts_since(0) == {1}


def test_partition_names() -> None:
    assert split_partition("hot") == ("hot", 0)
    assert split_partition("hot~7") == ("hot", 7)
    for bad in ("hot~0", "hot~07", "hot~64", "hot~", "~3", "hot~x", "a:b~1"):
        assert split_partition(bad) is None, bad
    assert logical_queue("hot~3") == "hot"
    assert split_task_id("hot~3:" + "a" * 32) == ("hot~3", "a" * 32)
    assert split_task_id("hot~99:" + "a" * 32) is None


async def test_a_queue_grows_and_never_shrinks(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("hot")
    assert (await admin.configure("hot", partitions=4, actor="alice")).partitions == 4
    members = await client.redis.smembers(client.keys.queues)
    assert {"hot", "hot~1", "hot~2", "hot~3"} <= members
    for bad in (0, 65, True, "4", 2.0):
        with pytest.raises(ValidationError) as info:
            await admin.configure("hot", partitions=bad)  # type: ignore[arg-type]
        assert info.value.field == "partitions"
    with pytest.raises(ValidationError, match="may only grow: queue 'hot' has 4"):
        await admin.configure("hot", partitions=2)
    assert (await admin.configure("hot")).partitions == 4
    assert (await admin.configure("hot", partitions=4)).partitions == 4
    stats = await admin.queue("hot")
    assert (stats.partitions, stats.depth_by_partition) == (4, [0, 0, 0, 0])
    assert [q.name for q in await admin.queues()] == ["hot"]  # the partitions are a detail
    entries = [e for e in await audit_entries(client) if e["action"] == "queue.configure"]
    assert [(e["queue"], e["actor"], e["detail"]) for e in entries] == [
        ("hot", "alice", "partitions=1->4")
    ]


async def test_a_growth_past_the_queue_registry_changes_nothing(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("hot")
    limited = Admin(
        Client(client.redis, client.settings.with_overrides(max_queues=3))  # type: ignore[arg-type]
    )
    with pytest.raises(QueueLimitError):
        await limited.configure("hot", partitions=8)
    assert (await admin.configure("hot")).partitions == 1
    assert not any("~" in m for m in await client.redis.smembers(client.keys.queues))


async def test_tasks_spread_over_the_partitions_and_the_stats_add_up(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("hot")
    await admin.configure("hot", partitions=4)
    handles = await client.enqueue_many([{"task": "t.a", "queue": "hot"}] * 400)
    ids = [h.id for h in handles if not isinstance(h, Exception)]
    assert len(ids) == 400
    assert Counter(partition_of(i) for i in ids) == {0: 100, 1: 100, 2: 100, 3: 100}
    one = await client.enqueue("t.a", queue="hot", priority=9)
    record = await client.get(one.id)
    assert record is not None
    assert record.queue == "hot"
    stats = await admin.queue("hot")
    assert (stats.depth, stats.partitions, sum(stats.depth_by_partition)) == (401, 4, 401)
    assert stats.depth_by_priority["9"] == 1
    assert [q.depth for q in await admin.queues() if q.name == "hot"] == [401]


async def test_a_replay_finds_its_task_after_the_queue_grew(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("hot")
    first = [await client.enqueue("t.a", queue="hot", idempotency_key=f"k{i}") for i in range(40)]
    assert {partition_of(h.id) for h in first} == {0}
    await admin.configure("hot", partitions=8)
    again = [await client.enqueue("t.a", queue="hot", idempotency_key=f"k{i}") for i in range(40)]
    assert [h.id for h in again] == [h.id for h in first]
    # A key first seen after the growth is placed by its hash, on every partition.
    fresh = [await client.enqueue("t.a", queue="hot", idempotency_key=f"n{i}") for i in range(80)]
    assert len({partition_of(h.id) for h in fresh}) == 8
    replayed = [
        await client.enqueue("t.a", queue="hot", idempotency_key=f"n{i}") for i in range(80)
    ]
    assert [h.id for h in replayed] == [h.id for h in fresh]
    assert (await admin.queue("hot")).depth == 120


async def claim_each(client: Client, names: list[str]) -> list[tuple[str, Claimed]]:
    out = []
    for name in names:
        paused, got = await client.scripts.claim(
            client.queue_keys(name), consumer="w1", count=100, events_maxlen=1000,
            retention_ms=600_000,
        )  # fmt: skip
        assert not paused
        out += [(name, c) for c in got]
    return out


async def test_pause_purge_the_dlq_and_delete_act_on_the_whole_queue(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("hot")
    await admin.configure("hot", partitions=3)
    names = ["hot", "hot~1", "hot~2"]
    await admin.pause("hot")
    for name in names:
        paused, _ = await client.scripts.claim(
            client.queue_keys(name), consumer="w1", count=1, events_maxlen=1000,
            retention_ms=600_000,
        )  # fmt: skip
        assert paused, name
    await admin.configure("hot", partitions=4)  # a new partition starts paused too
    assert await client.redis.hget(client.queue_keys("hot~3").meta, "paused") == "1"
    await admin.resume("hot")
    assert not (await admin.queue("hot")).paused
    names.append("hot~3")

    await client.enqueue_many([{"task": "t.fail", "queue": "hot"}] * 20)
    claimed = await claim_each(client, names)
    assert len(claimed) == 20
    assert {n for n, _ in claimed} == set(names)
    for name in names:
        mine = [c for n, c in claimed if n == name]
        assert set(await finish(client, name, mine, "dead")) == {"dead"}
    assert (await admin.queue("hot")).dead == 20

    seen: list[str] = []
    cursor = None
    while True:
        page = await admin.dlq_list("hot", limit=3, cursor=cursor)
        seen += [item.id for item in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(f"{n}:{c.rand}" for n, c in claimed)
    assert len({partition_of(i) for i in seen}) == 4

    requeued = await admin.dlq_requeue("hot", seen[:6])
    assert requeued == 6
    assert {await status(client, i) for i in seen[:6]} == {TaskStatus.QUEUED}
    assert await admin.purge("hot") == 6
    assert await admin.dlq_purge("hot") == 14
    stats = await admin.queue("hot")
    assert (stats.depth, stats.dead) == (0, 0)

    await admin.delete_queue("hot")
    assert not {m for m in await client.redis.smembers(client.keys.queues) if m.startswith("hot")}
    await admin.create_queue("hot")
    assert (await admin.configure("hot")).partitions == 1
