"""Misfire policies after a simulated downtime, zoned cron ticks and jitter, with the leader's
pass driven at explicit times (``fire_due(now_ms=...)``) against a real redis-server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from dtq_core.client import Client
from dtq_core.infra.settings import Settings
from dtq_core.ops.schedules import ScheduleSpec, ScheduleStore, jitter_delay
from dtq_core.protocol.keys import Keys

from .conftest import MakeReplica, Replica
from .test_cron import fired_ticks


def ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


DOWN = ms(2027, 3, 28, 0, 20)
"""The last tick handled before the downtime (01:20 CET, before the spring-forward gap)."""
BACK = ms(2027, 3, 28, 2, 5)
"""The leader is back at 04:05 CEST: 01:30 CET, 03:00, 03:30 and 04:00 CEST were missed."""
MISSED = [ms(2027, 3, 28, 0, 30), ms(2027, 3, 28, 1), ms(2027, 3, 28, 1, 30), ms(2027, 3, 28, 2)]


@pytest.fixture
def store(redis: aioredis.Redis, settings: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(settings.namespace))


async def leader(make_replica: MakeReplica, name: str = "a") -> Replica:
    replica = await make_replica(name, start=False)
    assert await replica.scheduler.leadership.try_acquire()
    return replica


async def put(store: ScheduleStore, **fields: object) -> None:
    spec = ScheduleSpec(
        name="paris", task="ops.sync", queue="cron", cron="*/30 * * * *", timezone="Europe/Paris",
        **fields,  # type: ignore[arg-type]
    )  # fmt: skip
    await store.put(spec)
    await store.set_watermark("paris", DOWN)


async def test_latest_fires_only_the_latest_missed_tick(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    await put(store)
    with capture_logs() as logs:
        await (await leader(make_replica)).scheduler.firer.fire_due(now_ms=BACK)
    assert await fired_ticks(redis, settings, "cron") == MISSED[-1:]
    assert [e["missed"] for e in logs if e["event"] == "schedule_fired"] == [3]
    assert (await store.watermarks())["paris"] == MISSED[-1]


async def test_skip_fires_none_of_the_missed_ticks_and_goes_on_from_the_next(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    await put(store, misfire="skip")
    firer = (await leader(make_replica)).scheduler.firer

    await firer.fire_due(now_ms=BACK)

    assert await fired_ticks(redis, settings, "cron") == []
    info = await store.info("paris")
    assert info is not None
    assert info.last_tick is not None
    assert (info.last_tick.outcome, info.last_tick.code) == ("skipped", "misfired")
    assert info.last_tick.reason is not None
    assert "4 missed tick(s)" in info.last_tick.reason
    assert (await store.watermarks())["paris"] == MISSED[-1]
    on_time = ms(2027, 3, 28, 2, 30)
    await firer.fire_due(now_ms=on_time + 2000)  # 2 s late: within DTQ_SCHEDULER_MISFIRE_GRACE_S
    assert await fired_ticks(redis, settings, "cron") == [on_time]


async def test_all_fires_every_missed_tick_once_across_a_failover(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    await put(store, misfire="all")
    old = await leader(make_replica, "old")
    await old.scheduler.firer.fire_due(now_ms=BACK)
    assert await fired_ticks(redis, settings, "cron") == MISSED
    assert (await store.watermarks())["paris"] == MISSED[-1]

    # The old leader dies after submitting the last two ticks but before recording them.
    await store.set_watermark("paris", MISSED[1])
    await redis.delete(Keys(settings.namespace).leader)
    new = await leader(make_replica, "new")
    with capture_logs() as logs:
        await new.scheduler.firer.fire_due(now_ms=BACK + 1000)

    assert await fired_ticks(redis, settings, "cron") == MISSED  # no tick twice
    assert [e["event"] for e in logs] == ["schedule_tick_replayed"] * 2
    assert (await store.watermarks())["paris"] == MISSED[-1]


async def test_all_fires_at_most_the_latest_misfire_cap_ticks(
    redis: aioredis.Redis, settings: Settings, store: ScheduleStore, make_replica: MakeReplica
) -> None:
    await put(store, misfire="all", misfire_cap=2)
    await (await leader(make_replica)).scheduler.firer.fire_due(now_ms=BACK)
    assert await fired_ticks(redis, settings, "cron") == MISSED[-2:]


async def test_a_tick_with_jitter_is_submitted_with_its_delay(
    redis: aioredis.Redis,
    settings: Settings,
    store: ScheduleStore,
    client: Client,
    make_replica: MakeReplica,
) -> None:
    spec = ScheduleSpec(name="spread", task="ops.sync", queue="cron", every_s=3600, jitter_s=600)
    await store.put(spec)
    now = await store.now_ms()
    hour = now - now % 3_600_000
    await store.set_watermark("spread", hour - 3_600_000)
    await (await leader(make_replica)).scheduler.firer.fire_due(now_ms=now)

    info = await store.info("spread")
    assert info is not None
    assert info.last_tick is not None
    assert info.last_tick.task_id is not None
    record = await client.get(info.last_tick.task_id)
    assert record is not None
    assert record.scheduled_for is not None
    delay = jitter_delay(spec, hour / 1000)
    assert 0 <= delay < 600
    submitted = record.created_at.timestamp()
    assert abs(record.scheduled_for.timestamp() - (submitted + delay)) < 0.01
