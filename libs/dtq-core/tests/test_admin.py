"""Admin operations against a real redis-server: stats, pause, purge, DLQ, workers, audit."""

from __future__ import annotations

import secrets
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from dtq_core.client import Client
from dtq_core.errors import (
    InvalidNameError,
    InvalidStateError,
    QueueFullError,
    RedisUnavailableError,
    TaskNotFoundError,
    ValidationError,
)
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import TaskStatus
from dtq_core.names import make_task_id, split_task_id
from dtq_core.ops import browse
from dtq_core.ops.admin import Admin, QueueNotFoundError
from dtq_core.ops.schedules import ScheduleSpec, ScheduleStore
from dtq_core.protocol.scripts import Claimed, Finish, Held
from dtq_devtools.testing import free_port, wait_until

ERROR = '{"attempt":1,"type":"ValueError","message":"boom"}'


async def claim(client: Client, queue: str, count: int) -> list[Claimed]:
    paused, got = await client.scripts.claim(
        client.queue_keys(queue),
        consumer="w1",
        count=count,
        events_maxlen=1000,
        retention_ms=600_000,
    )
    assert not paused
    return got


async def finish(client: Client, queue: str, claimed: list[Claimed], outcome: str) -> list[str]:
    payload = ERROR if outcome in {"dead", "retry"} else ""
    return await client.scripts.finish(
        client.queue_keys(queue),
        [Finish(Held(c.rand, c.priority, c.entry_id, c.lease), outcome, payload) for c in claimed],
        events_maxlen=1000,
        result_retention_ms=60_000,
        retention_ms=600_000,
        dlq_enabled=True,
        dlq_maxlen=10_000,
    )


async def make_dead(client: Client, queue: str, n: int, task: str = "t.fail") -> list[str]:
    """``n`` dead tasks in ``queue`` (whose other tasks must not be queued), in death order."""
    handles = await client.enqueue_many([{"task": task, "queue": queue} for _ in range(n)])
    assert all(not isinstance(h, Exception) for h in handles)
    got = await claim(client, queue, n)
    assert len(got) == n
    assert set(await finish(client, queue, got, "dead")) == {"dead"}
    return [make_task_id(queue, c.rand) for c in got]


async def audit(client: Client) -> list[dict[str, str]]:
    return [fields for _, fields in await client.redis.xrange(client.keys.audit)]


async def redis_ms(client: Client) -> int:
    seconds, micros = await client.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def status(client: Client, task_id: str) -> TaskStatus | None:
    record = await client.get(task_id)
    return None if record is None else record.status


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


async def test_unknown_and_invalid_queues_are_refused(client: Client) -> None:
    admin = Admin(client)
    await client.enqueue("t.a", queue="known")
    with pytest.raises(InvalidNameError):
        await admin.queue("bad queue")
    with pytest.raises(QueueNotFoundError) as info:
        await admin.pause("ghost")
    assert info.value.code == "queue_not_found"
    with pytest.raises(QueueNotFoundError):
        await admin.purge("ghost")
    with pytest.raises(InvalidNameError):
        await admin.dlq_list("{slot}")
    assert await client.redis.exists(client.queue_keys("ghost").meta) == 0
    assert await audit(client) == []


async def test_pause_makes_claims_report_paused_until_resume(client: Client) -> None:
    admin = Admin(client)
    handle = await client.enqueue("t.a", queue="q")
    qk = client.queue_keys("q")

    await admin.pause("q", actor="alice")
    assert await client.redis.hget(qk.meta, "paused") == "1"
    assert (await admin.queue("q")).paused
    paused, got = await client.scripts.claim(
        qk, consumer="w1", count=10, events_maxlen=1000, retention_ms=600_000
    )
    assert (paused, got) == (True, [])
    assert await status(client, handle.id) is TaskStatus.QUEUED

    await admin.resume("q", actor="alice")
    assert await client.redis.hget(qk.meta, "paused") == "0"
    assert not (await admin.queue("q")).paused
    (started,) = await claim(client, "q", 10)
    assert make_task_id("q", started.rand) == handle.id

    events = [f for _, f in await client.redis.xrange(qk.events) if f["type"].startswith("queue")]
    assert events == [
        {"type": "queue.paused", "actor": "alice"},
        {"type": "queue.resumed", "actor": "alice"},
    ]
    entries = await audit(client)
    assert [(e["action"], e["queue"], e["actor"], e["count"]) for e in entries] == [
        ("queue.pause", "q", "alice", "0"),
        ("queue.resume", "q", "alice", "0"),
    ]


async def test_audit_entries_carry_redis_time(client: Client) -> None:
    admin = Admin(client)
    await client.enqueue("t.a", queue="q")
    before = await redis_ms(client)
    await admin.pause("q")
    after = await redis_ms(client)
    (entry,) = await audit(client)
    assert entry["actor"] == "cli"
    assert before * 1000 <= int(entry["ts"]) <= (after + 1) * 1000
    with pytest.raises(ValidationError):
        await admin.resume("q", actor="")
    assert len(await audit(client)) == 1


async def test_purge_cancels_waiting_tasks_but_not_running_ones(client: Client) -> None:
    admin = Admin(client)
    handles = await client.enqueue_many([{"task": "t.a", "queue": "q"} for _ in range(250)])
    delayed = await client.enqueue("t.later", queue="q", delay_s=300)
    (running,) = await claim(client, "q", 1)
    running_id = make_task_id("q", running.rand)

    assert await admin.purge("q", actor="ops") == 250

    assert await status(client, running_id) is TaskStatus.RUNNING
    assert await status(client, delayed.id) is TaskStatus.CANCELLED
    waiting = [h.id for h in handles if not isinstance(h, Exception) and h.id != running_id]
    assert len(waiting) == 249
    for task_id in waiting:
        assert await status(client, task_id) is TaskStatus.CANCELLED
    stats = await admin.queue("q")
    assert (stats.depth, stats.delayed, stats.in_flight) == (0, 0, 1)
    assert await finish(client, "q", [running], "ok") == ["succeeded"]
    assert (await audit(client))[-1] | {"ts": ""} == {
        "action": "queue.purge",
        "queue": "q",
        "actor": "ops",
        "count": "250",
        "ts": "",
    }
    assert await admin.purge("q") == 0


async def test_a_dlq_page_stops_at_its_byte_cap(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = Admin(client)
    dead = (await make_dead(client, "q", 7))[::-1]
    size = len(msgspec.json.encode((await admin.dlq_list("q", limit=1)).items[0])) + 1
    monkeypatch.setattr(browse, "PAGE_BYTES_MAX", 3 * size)
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await admin.dlq_list("q", limit=1000, cursor=cursor)
        pages.append([r.id for r in page.items])
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == [dead[:3], dead[3:6], dead[6:]]


async def test_dlq_list_pages_newest_first(client: Client) -> None:
    admin = Admin(client)
    dead = await make_dead(client, "q", 5)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await admin.dlq_list("q", limit=2, cursor=cursor)
        pages += 1
        seen += [r.id for r in page.items]
        assert all(r.status is TaskStatus.DEAD for r in page.items)
        assert all(r.last_error and r.last_error.message == "boom" for r in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == dead[::-1]
    assert pages == 3

    everything = await admin.dlq_list("q")
    assert [r.id for r in everything.items] == dead[::-1]
    assert everything.next_cursor is None


async def test_dlq_list_filters_by_task_and_skips_expired_records(client: Client) -> None:
    admin = Admin(client)
    mails = await make_dead(client, "q", 3, task="mail.send")
    sms = await make_dead(client, "q", 2, task="sms.send")
    page = await admin.dlq_list("q", task="sms.send")
    assert [r.id for r in page.items] == sms[::-1]
    assert {r.task for r in page.items} == {"sms.send"}

    _, rand = split_task_id(mails[1]) or ("", "")
    await client.redis.delete(client.queue_keys("q").task(rand))
    page = await admin.dlq_list("q", task="mail.send", limit=1)
    assert [r.id for r in page.items] == [mails[2]]
    page = await admin.dlq_list("q", task="mail.send", limit=1, cursor=page.next_cursor)
    assert [r.id for r in page.items] == [mails[0]]
    assert page.next_cursor is None


async def test_dlq_list_validates_its_arguments(client: Client) -> None:
    admin = Admin(client)
    await make_dead(client, "q", 1)
    for kwargs in ({"limit": 0}, {"limit": 1001}, {"cursor": "nope"}, {"task": "a b"}):
        with pytest.raises(ValidationError):
            await admin.dlq_list("q", **kwargs)


async def test_dlq_requeue_by_ids_refuses_bad_ids_before_changing_anything(
    client: Client,
) -> None:
    admin = Admin(client)
    dead = await make_dead(client, "q", 3)
    other = await make_dead(client, "elsewhere", 1)
    queued = await client.enqueue("t.a", queue="q")
    missing = make_task_id("q", "0" * 32)
    cases: list[tuple[list[str], type[Exception]]] = [
        ([dead[0], "q:xyz"], ValidationError),
        ([dead[0], other[0]], TaskNotFoundError),
        ([dead[0], missing], TaskNotFoundError),
        ([dead[0], queued.id], InvalidStateError),
    ]
    for ids, error in cases:
        with pytest.raises(error):
            await admin.dlq_requeue("q", ids)
    assert (await admin.queue("q")).dead == 3
    assert await status(client, dead[0]) is TaskStatus.DEAD

    assert await admin.dlq_requeue("q", [dead[0], dead[2], dead[0]], actor="ops") == 2
    record = await client.get(dead[0])
    assert record is not None
    assert (record.status, record.attempts, len(record.errors)) == (TaskStatus.QUEUED, 0, 1)
    assert await status(client, dead[1]) is TaskStatus.DEAD
    stats = await admin.queue("q")
    assert (stats.dead, stats.depth) == (1, 3)
    entry = (await audit(client))[-1]
    assert (entry["action"], entry["count"], entry["actor"]) == ("dlq.requeue", "2", "ops")
    assert dead[2] in entry["detail"]


async def test_dlq_requeue_all_or_by_task_name(client: Client) -> None:
    admin = Admin(client)
    mails = await make_dead(client, "q", 130, task="mail.send")
    sms = await make_dead(client, "q", 2, task="sms.send")
    for kwargs in ({}, {"all": True, "task": "sms.send"}):
        with pytest.raises(ValidationError):
            await admin.dlq_requeue("q", **kwargs)
    with pytest.raises(ValidationError):
        await admin.dlq_requeue("q", [sms[0]], all=True)

    assert await admin.dlq_requeue("q", task="sms.send") == 2
    assert {await status(client, t) for t in sms} == {TaskStatus.QUEUED}
    assert (await admin.queue("q")).dead == 130

    assert await admin.dlq_requeue("q", all=True) == 130
    assert {await status(client, t) for t in mails} == {TaskStatus.QUEUED}
    stats = await admin.queue("q")
    assert (stats.dead, stats.depth) == (0, 132)
    details = [e["detail"] for e in await audit(client)]
    assert details == ["task=sms.send", "all"]


async def test_dlq_discard_deletes_only_the_given_dead_tasks(client: Client) -> None:
    admin = Admin(client)
    dead = await make_dead(client, "q", 3)
    await client.enqueue("t.a", queue="q")
    (running,) = await claim(client, "q", 1)
    with pytest.raises(InvalidStateError):
        await admin.dlq_discard("q", [dead[0], make_task_id("q", running.rand)])
    with pytest.raises(ValidationError):
        await admin.dlq_discard("q", [])
    assert (await admin.queue("q")).dead == 3

    assert await admin.dlq_discard("q", dead[:2]) == 2
    assert await client.get(dead[0]) is None
    assert await client.get(dead[1]) is None
    assert await status(client, dead[2]) is TaskStatus.DEAD
    assert (await admin.queue("q")).dead == 1
    assert (await audit(client))[-1]["action"] == "dlq.discard"


async def test_dlq_purge_empties_the_dlq_including_expired_records(client: Client) -> None:
    admin = Admin(client)
    dead = await make_dead(client, "q", 120)
    _, rand = split_task_id(dead[7]) or ("", "")
    await client.redis.delete(client.queue_keys("q").task(rand))
    survivor = await client.enqueue("t.a", queue="q")

    assert await admin.dlq_purge("q", actor="ops") == 120

    assert await client.redis.xlen(client.queue_keys("q").dlq) == 0
    assert await client.get(dead[0]) is None
    assert await status(client, survivor.id) is TaskStatus.QUEUED
    entry = (await audit(client))[-1]
    assert (entry["action"], entry["count"]) == ("dlq.purge", "120")
    assert await admin.dlq_purge("q") == 0


async def test_workers_come_from_the_registry_with_stale_ones_marked(client: Client) -> None:
    admin = Admin(client)
    assert await admin.workers() == []
    now = await redis_ms(client)
    fields: dict[str, Any] = {
        "host": "box",
        "pid": "42",
        "queues": "emails,default",
        "concurrency": "50",
        "inflight": "3",
        "processed": "100",
        "failed": "2",
        "started_at": str((now - 60_000) * 1000),
        "state": "draining",
        "version": "0.1.0",
    }
    await client.redis.zadd(client.keys.workers, {"w-fresh": now, "w-old": now - 10_000})
    await client.redis.hset(client.keys.worker("w-fresh"), mapping={"id": "w-fresh", **fields})
    await client.redis.hset(client.keys.worker("w-old"), mapping={"id": "w-old", **fields})
    await client.redis.zadd(client.keys.workers, {"w-gone": now})

    fresh, gone, old = await admin.workers()
    assert (fresh.id, fresh.host, fresh.pid, fresh.queues) == (
        "w-fresh",
        "box",
        42,
        ["emails", "default"],
    )
    assert (fresh.concurrency, fresh.in_flight, fresh.processed, fresh.failed) == (50, 3, 100, 2)
    assert fresh.state == "draining"
    assert fresh.version == "0.1.0"
    assert fresh.started_at is not None
    assert int(fresh.started_at.timestamp() * 1000) == now - 60_000
    assert int(fresh.last_heartbeat.timestamp() * 1000) == now
    assert 0 <= fresh.heartbeat_age_s < 3 * client.settings.worker.heartbeat_interval_s
    assert old.state == "stale"
    assert old.heartbeat_age_s >= 10
    assert (gone.id, gone.host, gone.pid, gone.state, gone.queues) == (
        "w-gone",
        None,
        None,
        "running",
        [],
    )


async def test_admin_reports_redis_unavailable_when_nothing_answers() -> None:
    async with Client.from_url(f"redis://127.0.0.1:{free_port()}/0") as client:
        admin = Admin(client)
        with pytest.raises(RedisUnavailableError):
            await admin.queues()
        with pytest.raises(RedisUnavailableError):
            await admin.pause("q")


@pytest.fixture
async def auditless(client: Client, settings: Any) -> Any:
    """An Admin whose Redis user may change queues and schedules but not append to the audit
    stream: its XADD is refused when queued, as a dropped connection would lose it."""
    ns = settings.namespace
    secret = secrets.token_hex(16)
    await client.redis.execute_command(
        "ACL", "SETUSER", "auditless", "reset", "on", f">{secret}", f"~{ns}:{{*", f"~{ns}:queues",
        f"~{ns}:schedules*", f"%R~{ns}:audit", "+@all",
    )  # fmt: skip
    redis = connect(settings, username="auditless", password=secret)
    limited = Client(redis, settings)
    yield Admin(limited)
    await limited.aclose()
    await redis.aclose()
    await client.redis.execute_command("ACL", "DELUSER", "auditless")


async def test_a_change_is_not_made_when_its_audit_entry_cannot_be(
    client: Client, auditless: Admin
) -> None:
    """The change and its entry are one transaction: no pause without its audit entry."""
    await client.enqueue("t", queue="mail")
    with pytest.raises(ResponseError, match="no permissions"):
        await auditless.pause("mail", actor="ops")
    assert not (await Admin(client).queue("mail")).paused
    assert await client.redis.xlen(client.keys.audit) == 0


async def test_a_schedule_change_is_not_made_when_its_audit_entry_cannot_be(
    client: Client, auditless: Admin
) -> None:
    store = ScheduleStore(client.redis, client.keys)
    limited = ScheduleStore(auditless.redis, auditless.keys)
    stamp = await auditless.stamp()

    def entry(spec: ScheduleSpec) -> Any:
        return stamp.entry("schedule.put", queue=spec.queue, actor="ops", count=1)

    nightly = ScheduleSpec(name="nightly", task="ops.report", every_s=60)
    with pytest.raises(ResponseError, match="no permissions"):
        await limited.put(nightly, audit_for=entry)
    assert await store.get("nightly") is None
    await store.put(nightly)
    for change in (limited.pause, limited.delete):
        with pytest.raises(ResponseError, match="no permissions"):
            await change("nightly", audit_for=entry)
        assert await store.get("nightly") == nightly
    assert await client.redis.xlen(client.keys.audit) == 0
