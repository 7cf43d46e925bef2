"""Schedule firing by the leader: on its ticks, once per tick across a failover, pauses,
admission control, and schedules declared in code."""

from __future__ import annotations

import msgspec
import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from dtq_core.client import Client
from dtq_core.errors import ValidationError
from dtq_core.infra.settings import Settings
from dtq_core.ops.schedules import ScheduleSpec, ScheduleStore
from dtq_core.protocol.keys import Keys
from dtq_core.tasks import TaskRegistry
from dtq_devtools.testing import announce_worker, wait_until
from dtq_scheduler_leader.cron import declare_schedules, declared_specs

from .conftest import MakeReplica, Replica

DAY_MS = 86_400_000


async def fired_ticks(redis: aioredis.Redis, settings: Settings, queue: str) -> list[int]:
    """The tick of every scheduled task in the queue's streams, one per stream entry."""
    qk = Keys(settings.namespace).queue(queue)
    ticks: list[int] = []
    for stream in qk.streams:
        for _, fields in await redis.xrange(stream):
            meta = await redis.hget(qk.task(fields["t"]), "meta")
            if meta is not None:
                ticks.append(msgspec.json.decode(meta)["tick"])
    return sorted(ticks)


def fired_by(replica: Replica, schedule: str) -> float:
    value = replica.scheduler.metrics.registry.get_sample_value(
        "dtq_schedule_fired_total", {"schedule": schedule}
    )
    return value or 0.0


@pytest.fixture
def store(redis: aioredis.Redis, settings: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(settings.namespace))


async def test_an_interval_schedule_fires_on_its_ticks(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    await store.put(
        ScheduleSpec(
            name="heartbeat", task="ops.ping", queue="cron", every_s=1, args=[1], priority=7
        )
    )
    replica = await make_replica("a")

    async def two_fired() -> bool:
        return len(await fired_ticks(redis, settings, "cron")) >= 2

    await wait_until(two_fired, timeout=5)

    ticks = await fired_ticks(redis, settings, "cron")
    assert all(t % 1000 == 0 for t in ticks)
    assert ticks[1] - ticks[0] == 1000
    assert fired_by(replica, "heartbeat") == len(ticks)
    qk = Keys(settings.namespace).queue("cron")
    (entry,) = await redis.xrange(qk.streams[7], count=1)
    task, args = await redis.hmget(qk.task(entry[1]["t"]), ["task", "args"])
    assert (task, args) == ("ops.ping", "[1]")


async def test_a_tick_is_one_task_even_when_its_leader_dies_before_recording_it(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    await store.put(ScheduleSpec(name="nightly", task="ops.report", queue="cron", every_s=86400))
    now_ms = await store.now_ms()
    await store.set_watermark("nightly", now_ms - 2 * DAY_MS)
    old = await make_replica("old", start=False)
    new = await make_replica("new", start=False)
    await old.scheduler.leadership.try_acquire()

    with capture_logs() as old_logs:
        await old.scheduler.firer.fire_due()
    # The old leader dies between its submit and its record of the tick.
    await store.set_watermark("nightly", now_ms - 2 * DAY_MS)
    await redis.delete(keys.leader)
    await new.scheduler.leadership.try_acquire()
    with capture_logs() as new_logs:
        await new.scheduler.firer.fire_due()

    midnight = now_ms - now_ms % DAY_MS
    assert await fired_ticks(redis, settings, "cron") == [midnight]
    (fired,) = [e for e in old_logs if e["event"] == "schedule_fired"]
    assert fired["missed"] == 1  # yesterday's tick was missed too; only the latest fires
    assert [e["event"] for e in new_logs] == ["schedule_tick_replayed"]
    assert (await store.watermarks())["nightly"] == midnight
    assert fired_by(old, "nightly") == 1
    assert fired_by(new, "nightly") == 0


async def test_each_tick_fires_once_across_a_crash_of_the_leader(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    await store.put(ScheduleSpec(name="every-second", task="ops.tick", queue="cron", every_s=1))
    a = await make_replica("a")
    b = await make_replica("b")
    leader = await wait_until(lambda: a if a.is_leader else b if b.is_leader else None)
    follower = b if leader is a else a
    await wait_until(lambda: fired_by(leader, "every-second") >= 2, timeout=5)

    await leader.crash()
    await wait_until(
        lambda: fired_by(follower, "every-second") >= 2, timeout=settings.scheduler.leader_ttl_s + 5
    )

    ticks = await fired_ticks(redis, settings, "cron")
    assert len(ticks) == len(set(ticks))  # no tick fired twice
    assert len(ticks) == fired_by(leader, "every-second") + fired_by(follower, "every-second")
    assert all(t % 1000 == 0 for t in ticks)


async def test_a_paused_schedule_fires_nothing_and_resuming_does_not_catch_up(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    await store.put(
        ScheduleSpec(name="hourly", task="ops.sync", queue="cron", every_s=3600, paused=True)
    )
    now_ms = await store.now_ms()
    await store.set_watermark("hourly", now_ms - 3 * 3_600_000)
    replica = await make_replica("a", start=False)
    await replica.scheduler.leadership.try_acquire()

    with capture_logs() as logs:
        await replica.scheduler.firer.fire_due()
        await store.resume("hourly")
        await replica.scheduler.firer.fire_due()

    assert await fired_ticks(redis, settings, "cron") == []
    assert [e["event"] for e in logs] == ["schedule_tick_skipped"]
    assert (await store.watermarks())["hourly"] >= now_ms


async def test_a_tick_refused_by_a_full_queue_is_deferred_not_dropped(
    redis: aioredis.Redis,
    settings: Settings,
    store: ScheduleStore,
    client: Client,
    make_replica: MakeReplica,
) -> None:
    await client.enqueue("t.filler", queue="cron")
    await store.put(ScheduleSpec(name="nightly", task="ops.report", queue="cron", every_s=86400))
    now_ms = await store.now_ms()
    await store.set_watermark("nightly", now_ms - DAY_MS)
    replica = await make_replica("a", start=False, max_queue_depth=1)
    await replica.scheduler.leadership.try_acquire()

    with capture_logs() as logs:
        await replica.scheduler.firer.fire_due()
        await replica.scheduler.firer.fire_due()  # within FULL_RETRY_S: not tried again

    assert [e["event"] for e in logs] == ["schedule_tick_deferred"]
    assert (await store.watermarks())["nightly"] == now_ms - DAY_MS
    assert await fired_ticks(redis, settings, "cron") == []


async def test_each_schedule_keeps_its_last_tick_outcome(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    """Issue 16.4: a schedule whose task no worker of its queue runs is refused at every tick;
    the refusal (and its reason) is kept with the schedule, as is a fired tick's task."""
    await announce_worker(redis, "reporter", ["reports"], {"reports.build": "reports"})
    await store.put(ScheduleSpec(name="good", task="reports.build", queue="reports", every_s=3600))
    await store.put(ScheduleSpec(name="typo", task="reports.buidl", queue="reports", every_s=3600))
    await store.put(ScheduleSpec(name="idle", task="reports.build", every_s=3600, paused=True))
    now_ms = await store.now_ms()
    for name in ("good", "typo", "idle"):
        await store.set_watermark(name, now_ms - 3_600_000)
    assert all(info.last_tick is None for info in await store.infos())
    replica = await make_replica("a", start=False)
    await replica.scheduler.leadership.try_acquire()

    await replica.scheduler.firer.fire_due()

    infos = {info.name: info for info in await store.infos()}
    good, typo, idle = (infos[n].last_tick for n in ("good", "typo", "idle"))
    assert good is not None
    assert good.outcome == "fired"
    assert good.task_id is not None
    assert good.task_id.startswith("reports:")
    assert await redis.exists(Keys(settings.namespace).queue("reports").task(good.task_id[8:]))
    assert typo is not None
    assert (typo.outcome, typo.code, typo.task_id) == ("refused", "unknown_task", None)
    assert typo.reason is not None
    assert "reports.buidl" in typo.reason
    assert typo.at >= typo.tick
    assert idle is not None
    assert idle.outcome == "skipped"
    assert await store.delete("typo")
    assert await redis.hget(Keys(settings.namespace).schedules_last, "typo") is None


async def test_code_declared_schedules_win_but_an_operator_pause_survives(
    store: ScheduleStore,
) -> None:
    registry = TaskRegistry()
    registry.schedule("digest", task="mail.digest", every_s=60, queue="mail")
    await declare_schedules(store, declared_specs(registry.schedules))
    await store.pause("digest")

    changed = TaskRegistry()
    changed.schedule("digest", task="mail.digest", cron="0 8 * * *", queue="mail", priority=8)
    names = await declare_schedules(store, declared_specs(changed.schedules))

    assert names == ["digest"]
    stored = await store.get("digest")
    assert stored is not None
    assert (stored.cron, stored.every_s, stored.priority) == ("0 8 * * *", None, 8)
    assert stored.paused


async def test_code_declared_schedules_come_back_when_redis_loses_them(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    """Catalogue B6 (docs/testing.md): Redis restarts empty. The leader stores the schedules
    its code declares again and fires them from then on (their watermarks are gone: no
    backfill)."""
    registry = TaskRegistry()
    registry.schedule("pulse", task="ops.ping", every_s=1, queue="cron")
    await declare_schedules(store, declared_specs(registry.schedules))
    await make_replica("a", registry=registry)

    async def fired() -> bool:
        return len(await fired_ticks(redis, settings, "cron")) >= 1

    await wait_until(fired, timeout=5, message="a first tick")
    with capture_logs() as logs:
        await redis.flushall()
        await redis.function_flush()
        await wait_until(fired, timeout=5, message="a tick after the reset")
    assert await store.get("pulse") is not None
    assert [e["schedules"] for e in logs if e["event"] == "schedules_restored"] == [["pulse"]]
    assert len(await fired_ticks(redis, settings, "cron")) <= 2  # no backfill


async def test_a_tick_of_a_task_this_process_registered_takes_its_definitions_defaults(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    """The leader submits a tick with the definition it has of the task: its attempt budget
    and timeout, as an ``enqueue`` of that definition would."""
    registry = TaskRegistry()

    @registry.task(name="ops.report", queue="reports", max_attempts=4, timeout_s=12)
    async def report() -> None:
        return None

    await store.put(ScheduleSpec(name="hourly", task="ops.report", queue="cron", every_s=1))
    await make_replica("a", registry=registry)

    async def fired() -> bool:
        return len(await fired_ticks(redis, settings, "cron")) >= 1

    await wait_until(fired, timeout=5, message="a first tick")
    qk = Keys(settings.namespace).queue("cron")
    (entry,) = await redis.xrange(qk.streams[5], count=1)
    record = await Client(redis, settings).get(f"cron:{entry[1]['t']}")
    assert record is not None
    # The schedule's queue wins over the definition's; the definition's limits apply.
    assert (record.queue, record.max_attempts, record.timeout_s) == ("cron", 4, 12.0)


def test_an_invalid_declared_schedule_is_refused_before_start() -> None:
    registry = TaskRegistry()
    registry.schedule("broken", task="t.x", cron="every monday")
    with pytest.raises(ValidationError, match="cron 'every monday' is invalid"):
        declared_specs(registry.schedules)
