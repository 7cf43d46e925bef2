"""Queue limits stored in Redis (``dtq_core.ops.admin.config``) against a real Redis: bad
values change nothing, and the claim and submit functions enforce concurrency, rate and depth."""

from __future__ import annotations

import asyncio
import time

import pytest

from dtq_core.client import Client
from dtq_core.errors import QueueFullError, ValidationError
from dtq_core.handles import TaskHandle
from dtq_core.ops.admin import Admin, QueueConfig
from dtq_core.protocol.outcomes import ClaimState
from dtq_core.protocol.scripts import Claimed
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.lifecycle import audit_entries, finish


async def claim(client: Client, queue: str, count: int) -> tuple[ClaimState, int, list[Claimed]]:
    return await client.scripts.claim_limited(
        client.queue_keys(queue), consumer="w1", count=count, events_maxlen=1000,
        retention_ms=600_000,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("rate", "100/x", "rate must look like 100/s"),
        ("rate", "0/s", "rate must be above 0"),
        ("rate", "-1/s", "rate must look like"),
        ("rate", "2000000/s", "at most 1000000/s"),
        ("rate", 100, "rate must look like"),
        ("concurrency", 0, "concurrency must be an integer from 1 to 100000"),
        ("concurrency", 100_001, "concurrency must be an integer from 1"),
        ("concurrency", True, "concurrency must be an integer"),
        ("max_depth", -1, "max_depth must be an integer from 0"),
        ("burst", 5, "burst needs a rate"),
    ],
)
async def test_a_bad_value_is_refused_and_changes_nothing(
    client: Client, setting: str, value: object, message: str
) -> None:
    admin = Admin(client)
    await admin.create_queue("crm")
    await admin.configure("crm", concurrency=7)
    with pytest.raises(ValidationError, match=message) as info:
        await admin.configure("crm", **{setting: value})
    assert info.value.field == setting
    assert await admin.config("crm") == QueueConfig(concurrency=7)
    assert len([e for e in await audit_entries(client) if e["action"] == "queue.configure"]) == 1


async def test_settings_are_kept_changed_and_cleared(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("crm")
    config = await admin.configure("crm", rate="6000/m", concurrency=50, actor="alice")
    assert config == QueueConfig(rate="6000/m", concurrency=50)
    assert await admin.configure("crm", max_depth=100) == QueueConfig(
        rate="6000/m", concurrency=50, max_depth=100
    )
    assert await admin.configure("crm", rate=None, burst=None) == QueueConfig(
        concurrency=50, max_depth=100
    )
    stats = await admin.queue("crm")
    assert (stats.rate, stats.concurrency, stats.max_depth) == (None, 50, 100)
    meta = await client.redis.hgetall(client.queue_keys("crm").meta)
    assert {k: v for k, v in meta.items() if k.startswith("lim_")} == {
        "lim_c": "50",
        "lim_d": "100",
    }
    details = [e["detail"] for e in await audit_entries(client) if e["action"] == "queue.configure"]
    assert details == [
        "rate=None->6000/m concurrency=None->50",
        "max_depth=None->100",
        "rate=6000/m->None",
    ]


async def test_the_claim_starts_no_more_than_the_concurrency_allows(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("crm")
    await admin.configure("crm", concurrency=3)
    await client.enqueue_many([{"task": "t.a", "queue": "crm"}] * 10)
    state, _, got = await claim(client, "crm", 10)
    assert (state, len(got)) == (ClaimState.FULL, 3)
    state, _, more = await claim(client, "crm", 10)
    assert (state, more) == (ClaimState.FULL, [])
    await finish(client, "crm", got[:1], "ok")  # the finish frees its slot
    state, _, more = await claim(client, "crm", 10)
    assert (state, len(more)) == (ClaimState.FULL, 1)
    await admin.configure("crm", concurrency=None)
    state, _, rest = await claim(client, "crm", 10)
    assert (state, len(rest)) == (ClaimState.OK, 6)


async def test_entries_delivered_beyond_the_limit_go_back_to_the_queue(client: Client) -> None:
    """Entries a wake-up read delivered count as taken slots; past the limit they are handed
    back (queued again for any worker), never started."""
    admin = Admin(client)
    await admin.create_queue("crm")
    handles = await client.enqueue_many([{"task": "t.a", "queue": "crm"}] * 3)
    qk = client.queue_keys("crm")
    await claim(client, "crm", 0)  # the queue's groups exist
    reply = await client.redis.xreadgroup("workers", "w1", {qk.streams[5]: ">"}, count=3)
    delivered = [(5, eid, fields["t"]) for eid, fields in reply[0][1]]
    await admin.configure("crm", concurrency=1)
    state, _, got = await client.scripts.claim_limited(
        qk, consumer="w1", count=3, events_maxlen=1000, retention_ms=600_000, adopt=delivered
    )
    assert (state, [c.rand for c in got]) == (ClaimState.FULL, [delivered[0][2]])
    statuses = [(await client.get(h.id)).status.value for h in handles]  # type: ignore[union-attr]
    assert sorted(statuses) == ["queued", "queued", "running"]
    pending = [(await client.redis.xpending(s, "workers"))["pending"] for s in qk.streams]
    assert sum(pending) == 1  # the handed-back ones are new entries, not pending


async def test_the_rate_lets_a_burst_through_then_one_per_interval(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("api")
    await admin.configure("api", rate="20/s", burst=2)
    await client.enqueue_many([{"task": "t.a", "queue": "api"}] * 10)
    state, wait_ms, got = await claim(client, "api", 10)
    assert (state, len(got)) == (ClaimState.LIMITED, 2)
    assert 1 <= wait_ms <= 50
    state, wait_ms, none = await claim(client, "api", 10)
    assert (state, none) == (ClaimState.LIMITED, [])
    started = time.monotonic()

    async def one_more() -> list[Claimed]:
        return (await claim(client, "api", 10))[2]

    third = await wait_until(one_more, timeout=5, interval=0.005)
    assert len(third) == 1
    assert time.monotonic() - started >= (wait_ms - 5) / 1000
    assert await client.redis.pttl(client.queue_keys("api").rate) > 0


async def test_the_queue_admits_up_to_its_own_max_depth(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("small")
    await admin.configure("small", max_depth=2)
    results = await client.enqueue_many(
        [{"task": "t.a", "queue": "small"}] * 3, return_exceptions=True
    )
    assert isinstance(results[2], QueueFullError)
    assert "holds its max_depth=2 waiting tasks" in str(results[2])
    await admin.configure("small", max_depth=0)  # 0: no limit
    assert not isinstance(await client.enqueue("t.a", queue="small"), Exception)


async def test_each_partition_takes_a_share_of_the_limits(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("hot")
    await admin.configure("hot", partitions=2, concurrency=3, rate="10/s", max_depth=5)
    for name, want in (("hot", "2"), ("hot~1", "2")):
        meta = await client.redis.hgetall(client.queue_keys(name).meta)
        assert (meta["lim_c"], meta["lim_d"], meta["lim_t"], meta["lim_b"]) == (
            want,
            "3",
            "200000",
            "1",
        ), name
    await admin.configure("hot", partitions=4)  # the shares follow a growth
    meta = await client.redis.hgetall(client.queue_keys("hot~3").meta)
    assert (meta["lim_c"], meta["lim_t"]) == ("1", "400000")


async def test_a_waiting_task_says_why(client: Client) -> None:
    admin = Admin(client)
    await admin.create_queue("why")
    later = await client.enqueue("t.a", queue="why", delay_s=600)
    record = await client.get(later.id)
    assert record is not None
    assert record.waiting is not None
    assert (record.waiting.reason, record.waiting.until) == ("scheduled", record.scheduled_for)

    _, second = await client.enqueue_many([{"task": "t.a", "queue": "why"}] * 2)
    assert not isinstance(second, Exception)

    async def reason() -> tuple[str, str | None]:
        got = await client.get(second.id)
        assert got is not None
        assert got.waiting is not None
        return got.waiting.reason, got.waiting.detail

    assert await reason() == ("ready", None)
    await admin.pause("why")
    assert (await reason())[0] == "queue_paused"
    await admin.resume("why")
    await admin.configure("why", concurrency=1)
    (_, _, got) = await claim(client, "why", 1)
    assert len(got) == 1
    assert await reason() == ("queue_concurrency_full", "1/1 running")
    await admin.configure("why", concurrency=None, rate="1/m", burst=1)
    state, _, _ = await claim(client, "why", 1)
    assert state is ClaimState.OK  # the rate's one start (second's)
    third = await client.enqueue("t.a", queue="why")
    record = await client.get(third.id)
    assert record is not None
    assert record.waiting is not None
    assert record.waiting.reason == "rate_limited"
    assert record.waiting.until is not None
    assert 50 <= (record.waiting.until.timestamp() - time.time()) <= 61
    running = await client.get(got[0].rand and f"why:{got[0].rand}")
    assert running is not None
    assert running.waiting is None


async def submit_many_ways(client: Client, n: int, **fields: object) -> list[TaskHandle]:
    """``n`` submits of the same key at once, from ``n`` concurrent callers."""
    results = await asyncio.gather(
        *(client.enqueue("t.a", args=[i], queue="dd", **fields) for i in range(n))  # type: ignore[arg-type]
    )
    return list(results)


async def test_until_finished_returns_the_keys_unfinished_task(client: Client) -> None:
    await Admin(client).create_queue("dd")
    handles = await submit_many_ways(client, 20, dedup="until_finished", dedup_key="report:7")
    new = [h for h in handles if h.created]
    assert len(new) == 1
    assert {h.id for h in handles} == {new[0].id}
    assert {h.dedup for h in handles if not h.created} == {"original"}
    events = [f for _, f in await client.redis.xrange(client.queue_keys("dd").events)]
    deduplicated = [f for f in events if f["type"] == "task.deduplicated"]
    assert sum(len(f["ids"].split(",")) for f in deduplicated) == 19
    # Once it finished, the key makes a new task again.
    (_, _, got) = await claim(client, "dd", 1)
    await finish(client, "dd", got, "ok")
    again = await client.enqueue("t.a", queue="dd", dedup="until_finished", dedup_key="report:7")
    assert again.created
    assert again.id != new[0].id


async def test_throttle_makes_one_task_per_window(client: Client) -> None:
    await Admin(client).create_queue("dd")
    handles = await submit_many_ways(client, 10, dedup="throttle", dedup_key="ping", throttle_s=0.3)
    assert sum(h.created for h in handles) == 1
    (_, _, got) = await claim(client, "dd", 1)
    await finish(client, "dd", got, "ok")  # finished, but the window still holds
    held = await client.enqueue(
        "t.a", queue="dd", dedup="throttle", dedup_key="ping", throttle_s=0.3
    )
    assert (held.created, held.dedup) == (False, "original")

    async def next_window() -> TaskHandle | None:
        h = await client.enqueue(
            "t.a", queue="dd", dedup="throttle", dedup_key="ping", throttle_s=0.3
        )
        return h if h.created else None

    assert await wait_until(next_window, timeout=5)


async def test_debounce_runs_once_with_the_last_arguments(client: Client) -> None:
    await Admin(client).create_queue("dd")
    first = await client.enqueue(
        "t.a", args=[0], queue="dd", dedup="debounce", dedup_key="index", debounce_s=30
    )
    assert first.created
    before = (await client.get(first.id)).scheduled_for  # type: ignore[union-attr]
    handles = await submit_many_ways(client, 10, dedup="debounce", dedup_key="index", debounce_s=30)
    assert {h.id for h in handles} == {first.id}
    assert {h.dedup for h in handles} == {"replaced"}
    record = await client.get(first.id)
    assert record is not None
    assert record.status.value == "scheduled"
    assert record.args[0] in range(10)  # the last submit's arguments
    assert record.scheduled_for is not None
    assert before is not None
    assert record.scheduled_for >= before  # pushed back
    assert await client.redis.zcard(client.queue_keys("dd").delayed) == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dedup": "sometimes", "dedup_key": "k"}, "dedup must be until_finished, debounce or"),
        ({"dedup": "until_finished"}, "needs a dedup_key"),
        ({"dedup_key": "k"}, "dedup_key needs a dedup mode"),
        ({"dedup": "debounce", "dedup_key": "k"}, "dedup=debounce needs debounce_s"),
        ({"dedup": "throttle", "dedup_key": "k", "throttle_s": 0}, "throttle_s must be"),
        ({"dedup": "until_finished", "dedup_key": "k", "throttle_s": 5}, "throttle_s goes with"),
        ({"dedup": "debounce", "dedup_key": "k", "debounce_s": 1, "delay_s": 5}, "sets the delay"),
    ],
)
async def test_a_bad_dedup_request_is_refused_before_anything_is_written(
    client: Client, fields: dict[str, object], message: str
) -> None:
    await Admin(client).create_queue("dd")
    with pytest.raises(ValidationError, match=message):
        await client.enqueue("t.a", queue="dd", **fields)  # type: ignore[arg-type]
    assert (await Admin(client).queue("dd")).depth == 0
