"""Groups against a real Redis (docs/flow-control.md, "Groups"): the groups of a queue take turns
(weighted) whatever their backlogs, group limits hold in the claim, a group pauses on its own,
and every way an attempt ends frees its group's slot once."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from dtq_core import TaskRegistry
from dtq_core.client import Client
from dtq_core.errors import QueueFullError, ValidationError
from dtq_core.messages import TaskRequest, TaskStatus
from dtq_core.ops.admin import Admin
from dtq_core.protocol.scripts import Claimed, Held
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.lifecycle import audit_entries, finish

RET = 600_000


async def claim(client: Client, queue: str, count: int) -> list[Claimed]:
    _, _, got = await client.scripts.claim_limited(
        client.queue_keys(queue), consumer="w1", count=count, events_maxlen=1000, retention_ms=RET
    )
    return got


async def submit(client: Client, queue: str, group: str, n: int, **kw: object) -> list[str]:
    handles = await client.enqueue_many(
        [TaskRequest(task="t", queue=queue, group=group, kwargs={"i": i}, **kw) for i in range(n)]  # type: ignore[arg-type]
    )
    assert not [h for h in handles if isinstance(h, Exception)]
    return [h.id for h in handles if not isinstance(h, Exception)]


async def group_of(client: Client, claimed: Claimed, queue: str) -> str:
    record = await client.get(f"{queue}:{claimed.rand}")
    assert record is not None
    assert record.group is not None
    return record.group


async def run_one_at_a_time(client: Client, queue: str, n: int) -> list[str]:
    """Start and finish ``n`` tasks one by one; the groups in the order they started."""
    order: list[str] = []
    for _ in range(n):
        (c,) = await claim(client, queue, 1)
        order.append(await group_of(client, c, queue))
        await finish(client, queue, [c], "ok")
    return order


async def test_a_late_small_group_is_not_stuck_behind_a_large_one(client: Client) -> None:
    await Admin(client).create_queue("q")
    await submit(client, "q", "big", 100)
    await submit(client, "q", "small", 3)
    order = await run_one_at_a_time(client, "q", 8)
    # Turns alternate: the small group's three tasks start among the first seven.
    assert order == ["big", "small"] * 3 + ["big", "big"], order


async def test_a_heavier_group_gets_more_turns(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.set_group("q", "a", weight=3)
    await submit(client, "q", "a", 60)
    await submit(client, "q", "b", 60)
    counts = Counter(await run_one_at_a_time(client, "q", 40))
    assert counts == {"a": 30, "b": 10}, counts


async def test_one_claim_takes_the_groups_in_turn(client: Client) -> None:
    await Admin(client).create_queue("q")
    await submit(client, "q", "a", 10)
    await submit(client, "q", "b", 10)
    got = await claim(client, "q", 8)
    groups = [await group_of(client, c, "q") for c in got]
    assert Counter(groups) == {"a": 4, "b": 4}, groups


async def test_the_group_concurrency_holds_and_a_finish_frees_a_slot(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.configure("q", group_concurrency=2)
    ids = await submit(client, "q", "g", 6)
    await submit(client, "q", "other", 1)
    got = await claim(client, "q", 10)
    assert Counter([await group_of(client, c, "q") for c in got]) == {"g": 2, "other": 1}
    assert await claim(client, "q", 10) == []
    waiting = await client.get(ids[3])
    assert waiting is not None
    assert waiting.waiting is not None
    assert waiting.waiting.reason == "group_concurrency_full"
    assert waiting.waiting.detail == "group g: 2/2 running"
    g_task = next(c for c in got if c.rand in {i.split(":")[1] for i in ids})
    await finish(client, "q", [g_task], "ok")
    assert len(await claim(client, "q", 10)) == 1
    stats = await admin.group("q", "g")
    assert (stats.running, stats.waiting, stats.queued) == (2, 3, 0)


async def test_the_group_rate_holds_in_the_claim_and_the_group_comes_back_when_due(
    client: Client,
) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.configure("q", group_rate="4/s")  # burst 1: one start every 250 ms
    ids = await submit(client, "q", "g", 3)
    await submit(client, "q", "other", 2)
    # Each group's rate is its own: one start of each now.
    got = await claim(client, "q", 10)
    assert Counter([await group_of(client, c, "q") for c in got]) == {"g": 1, "other": 1}
    record = await client.get(ids[1])
    assert record is not None
    assert record.waiting is not None
    assert record.waiting.reason == "group_rate_limited"
    assert record.waiting.until is not None
    starts: list[Claimed] = []

    async def started() -> bool:
        starts.extend(await claim(client, "q", 10))
        return len(starts) == 3

    await wait_until(started, timeout=3, message="the groups' next tasks, at their rate")
    records = [await client.get(f"q:{c.rand}") for c in starts]
    first, second = (r for r in records if r is not None and r.group == "g")
    assert first is not None
    assert second is not None
    assert first.started_at is not None
    assert second.started_at is not None
    gap = (second.started_at - first.started_at).total_seconds()
    assert gap >= 0.24, gap


async def test_a_paused_group_waits_while_the_others_go_on(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    ids = await submit(client, "q", "g", 3)
    await submit(client, "q", "other", 3)
    paused = await admin.set_group("q", "g", paused=True, actor="alice")
    assert paused.paused
    got = await claim(client, "q", 10)
    # The task of g already in the stream goes back to its group; the other group runs.
    assert {await group_of(client, c, "q") for c in got} == {"other"}
    record = await client.get(ids[0])
    assert record is not None
    assert record.waiting is not None
    assert record.waiting.reason == "group_paused"
    resumed = await admin.set_group("q", "g", paused=False)
    assert (resumed.paused, resumed.queued) == (False, 1)
    got = await claim(client, "q", 10)
    assert [await group_of(client, c, "q") for c in got] == ["g"] * 3
    assert [
        e["action"] for e in await audit_entries(client) if e["action"].startswith("group")
    ] == [
        "group.pause",
        "group.resume",
    ]


async def test_a_release_and_a_reclaim_give_the_slot_back_once(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.configure("q", group_concurrency=2)
    await submit(client, "q", "g", 4)
    qk = client.queue_keys("q")
    got = await claim(client, "q", 10)
    assert len(got) == 2
    released = await client.scripts.release(
        qk, [Held(got[0].rand, got[0].priority, got[0].entry_id, got[0].lease)],
        events_maxlen=1000, reason="shutdown",
    )  # fmt: skip
    assert released == [got[0].rand]
    result = await client.scripts.reclaim(
        qk, consumer="reaper", min_idle_ms=0, budget=100, events_maxlen=1000,
        retention_ms=RET, dlq_enabled=True, dlq_maxlen=100, cursors=["0-0"] * 10,
    )  # fmt: skip
    assert result.requeued == 1
    stats = await admin.group("q", "g")
    assert (stats.running, stats.waiting + stats.queued) == (0, 4)
    # A late finish of either attempt is stale and frees nothing a second time.
    assert await finish(client, "q", [got[1]], "ok") == ["stale"]
    again = await claim(client, "q", 10)
    assert len(again) == 2
    assert (await admin.group("q", "g")).running == 2
    # The released task kept its place: it starts first again.
    assert again[0].rand == got[0].rand


async def test_cancel_and_purge_empty_a_group(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    ids = await submit(client, "q", "g", 5)
    assert (await admin.queue("q")).waiting_in_groups == 4
    assert await client.cancel(ids[4])
    stats = await admin.queue("q")
    assert (stats.waiting_in_groups, stats.depth, stats.groups) == (3, 1, 1)
    assert await admin.purge("q") == 4
    stats = await admin.queue("q")
    assert (stats.waiting_in_groups, stats.depth) == (0, 0)
    assert await claim(client, "q", 10) == []
    assert (await admin.queue("q")).groups == 0


async def test_the_depth_limit_counts_tasks_waiting_in_groups(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.configure("q", max_depth=3)
    await submit(client, "q", "g", 3)
    with pytest.raises(QueueFullError):
        await client.enqueue("t", queue="q", group="h")


async def test_a_delayed_and_a_retried_task_come_back_through_their_group(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.configure("q", group_concurrency=1)
    (first,) = await submit(client, "q", "g", 1)
    (later,) = await submit(client, "q", "g", 1, delay_s=0.05)
    (c,) = await claim(client, "q", 10)
    assert await finish(client, "q", [c], "retry") == ["retrying"]

    async def promoted() -> bool:
        await client.scripts.promote(
            client.queue_keys("q"), epoch=1, limit=100, events_maxlen=1000, retention_ms=RET
        )
        return (await admin.group("q", "g")).waiting + (await admin.group("q", "g")).queued == 2

    await wait_until(promoted, timeout=3, message="both back in the group")
    # The retry kept its place ahead of the delayed task, and the limit of one holds.
    got = await claim(client, "q", 10)
    assert [f"q:{x.rand}" for x in got] == [first]
    assert (await client.get(later)).status is TaskStatus.QUEUED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "group",
    ["", "x" * 129, "a/b", "tab\there", "é" * 65],
    ids=["empty", "long", "slash", "ctl", "bytes"],
)
async def test_a_bad_group_is_refused_before_anything_is_written(
    client: Client, group: str
) -> None:
    with pytest.raises(ValidationError) as info:
        await client.enqueue("t", queue="q", group=group)
    assert info.value.field == "group"
    assert await client.redis.keys("dtq:{q}:*") == []


async def test_a_bad_group_setting_changes_nothing(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    for weight in (0, 101, True):
        with pytest.raises(ValidationError, match="weight must be an integer from 1 to 100"):
            await admin.set_group("q", "g", weight=weight)
    with pytest.raises(ValidationError, match="nothing to change"):
        await admin.set_group("q", "g")
    with pytest.raises(ValidationError, match="group_concurrency must be an integer"):
        await admin.configure("q", group_concurrency=0)
    with pytest.raises(ValidationError, match="group_rate must look like"):
        await admin.configure("q", group_rate="5/x")
    assert (await admin.groups("q")).groups == []
    config = await admin.config("q")
    assert (config.group_concurrency, config.group_rate) == (None, None)


async def test_group_by_takes_the_group_from_a_keyword_argument(client: Client) -> None:
    registry = TaskRegistry()

    @registry.task(name="export", queue="q", group_by="customer_id")
    async def export(customer_id: int) -> None:
        return None

    definition = registry.get("export")
    assert definition is not None
    handle = await client.enqueue(definition, kwargs={"customer_id": 42})
    record = await client.get(handle.id)
    assert record is not None
    assert record.group == "42"
    explicit = await client.enqueue(definition, kwargs={"customer_id": 42}, group="vip")
    assert (await client.get(explicit.id)).group == "vip"  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="keyword argument 'customer_id'"):
        await client.enqueue(definition, kwargs={})


async def test_a_group_lives_in_one_partition(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("p")
    await admin.configure("p", partitions=4)
    ids = []
    for group in ("a", "b", "c", "d", "e"):
        ids.append({i.split(":")[0] for i in await submit(client, "p", group, 8)})
    assert all(len(parts) == 1 for parts in ids), ids
    listed = await admin.groups("p")
    assert [(g.name, g.waiting + g.queued) for g in listed.groups] == [(n, 8) for n in "abcde"]
    page = await admin.groups("p", limit=2)
    assert [g.name for g in page.groups] == ["a", "b"]
    assert page.next_cursor == "b"
    rest = await admin.groups("p", limit=10, cursor=page.next_cursor)
    assert [g.name for g in rest.groups] == ["c", "d", "e"]


async def test_a_queue_with_tasks_waiting_in_groups_is_not_deleted(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.set_group("q", "g", paused=True)
    await submit(client, "q", "g", 2)
    with pytest.raises(Exception, match="not empty"):
        await admin.delete_queue("q")
    await admin.purge("q")
    await admin.delete_queue("q")
    assert await client.redis.keys("dtq:{q}:g*") == []


async def test_concurrent_submits_and_claims_keep_the_counts_exact(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.configure("q", group_concurrency=3)

    async def produce(group: str) -> None:
        for _ in range(5):
            await submit(client, "q", group, 10)

    async def consume() -> int:
        done = 0
        for _ in range(200):
            got = await claim(client, "q", 7)
            for c in got:
                await finish(client, "q", [c], "ok")
            done += len(got)
            await asyncio.sleep(0)
        return done

    results = await asyncio.gather(*(produce(g) for g in "abcd"), consume(), consume())
    left = sum(r for r in results if isinstance(r, int))

    async def drained() -> bool:
        nonlocal left
        for c in await claim(client, "q", 50):
            await finish(client, "q", [c], "ok")
            left += 1
        return left == 200

    await wait_until(drained, timeout=10, message="every task ran")
    stats = await admin.queue("q")
    assert (stats.waiting_in_groups, stats.groups, stats.depth, stats.in_flight) == (0, 0, 0, 0)
    assert await client.redis.keys("dtq:{q}:g:*") == []


async def test_a_raised_group_limit_is_used_at_once(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.configure("q", group_concurrency=1)
    await submit(client, "q", "g", 5)
    assert len(await claim(client, "q", 10)) == 1
    assert await claim(client, "q", 10) == []
    await admin.configure("q", group_concurrency=3)
    # Nothing of the group finished: the new room is taken all the same.
    assert len(await claim(client, "q", 10)) == 2
    assert (await admin.group("q", "g")).running == 3


async def test_a_lowered_group_limit_holds_for_a_task_already_in_a_stream(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("q")
    await admin.configure("q", group_concurrency=3)
    await submit(client, "q", "g", 5)
    assert len(await claim(client, "q", 1)) == 1  # its next task enters the stream
    assert (await admin.group("q", "g")).queued == 1
    await admin.configure("q", group_concurrency=1)
    assert await claim(client, "q", 10) == []
    stats = await admin.group("q", "g")
    assert (stats.running, stats.queued, stats.waiting) == (1, 0, 4)
