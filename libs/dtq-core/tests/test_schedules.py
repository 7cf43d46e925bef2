"""Schedules: validation, tick math (pure) and the store (against Redis)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from dtq_core.errors import InvalidNameError, ValidationError
from dtq_core.infra.settings import Settings
from dtq_core.ops.schedules import (
    ScheduleSpec,
    ScheduleStore,
    decode,
    due_ticks,
    encode,
    idempotency_key,
    next_fire,
    next_fire_at,
    validate,
)
from dtq_core.protocol.keys import Keys
from dtq_core.tasks import Schedule

T0 = datetime(2024, 1, 1, 0, 3, tzinfo=UTC).timestamp()  # 00:03 UTC, a Monday


def spec(**fields: object) -> ScheduleSpec:
    base: dict[str, object] = {"name": "s", "task": "t.run", "every_s": 60.0}
    base.update(fields)
    return ScheduleSpec(**base)  # type: ignore[arg-type]


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"cron": "* * * * *"}, ValidationError, "exactly one of cron and every_s"),
        ({"every_s": None}, ValidationError, "exactly one of cron and every_s"),
        ({"every_s": None, "cron": "* * * *"}, ValidationError, "give five fields"),
        ({"every_s": None, "cron": "0 0 * * * *"}, ValidationError, "give five fields"),
        ({"every_s": None, "cron": "61 * * * *"}, ValidationError, "cron '61 \\* \\* \\* \\*'"),
        ({"every_s": None, "cron": "@reboot"}, ValidationError, "is invalid"),
        ({"every_s": None, "cron": "0 0 30 2 *"}, ValidationError, "never fires"),
        ({"every_s": 0.5}, ValidationError, "every_s must be a number of seconds from 1"),
        ({"every_s": float("inf")}, ValidationError, "every_s must be"),
        ({"every_s": True}, ValidationError, "every_s must be"),
        ({"name": "bad name"}, InvalidNameError, "schedule name 'bad name' is invalid"),
        ({"task": "a:b"}, InvalidNameError, "task name"),
        ({"queue": "{q}"}, InvalidNameError, "queue name"),
        ({"timezone": "Europe/Paris"}, ValidationError, "timezone 'Europe/Paris'"),
        ({"priority": 10}, ValidationError, "priority must be an integer from 0 to 9"),
        ({"args": ({1, 2},)}, ValidationError, "args must be a list"),
        ({"args": [object()]}, ValidationError, "must be JSON"),
        ({"kwargs": {1: "x"}}, ValidationError, "kwargs must be an object with string keys"),
    ],
)
def test_invalid_schedules_are_refused_with_a_clear_message(
    fields: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        validate(spec(**fields))


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("61 * * * *", "minute '61' is out of range (allowed: 0-59)"),
        ("0 24 * * *", "hour '24' is out of range (allowed: 0-23)"),
        ("0 0 0 * *", "day-of-month '0' is out of range (allowed: 1-31)"),
        ("0 0 1 13 *", "month '13' is out of range (allowed: 1-12 or JAN-DEC)"),
        ("0 0 * * 8", "day-of-week '8' is out of range (allowed: 0-7"),
        ("5-70 * * * *", "minute '5-70' is out of range"),
        ("1,2,99 * * * *", "minute '1,2,99' is out of range"),
        ("*/0 * * * *", "minute '*/0' is not a valid field"),
        ("0 0 * JANX *", "month 'JANX' is not a valid field"),
    ],
)
def test_a_five_field_cron_names_the_field_that_is_wrong(cron: str, message: str) -> None:
    """Five fields were given: the message says which one is wrong and what it allows, not
    "give five fields"."""
    with pytest.raises(ValidationError, match=re.escape(message)) as exc:
        validate(spec(every_s=None, cron=cron))
    assert "give five fields" not in str(exc.value)
    assert exc.value.field == "cron"


@pytest.mark.parametrize("cron", ["*/5 * * * *", "0 8 * * 1-5", "@hourly", "@daily"])
def test_valid_cron_schedules_pass(cron: str) -> None:
    s = spec(every_s=None, cron=cron)
    assert validate(s) is s


def test_the_payload_cap_applies_when_given() -> None:
    big = spec(args=["x" * 1000])
    assert validate(big) is big
    with pytest.raises(ValidationError, match="DTQ_MAX_PAYLOAD_BYTES=500"):
        validate(big, max_payload_bytes=500)


def test_decode_round_trips_and_refuses_malformed_json() -> None:
    original = spec(args=[1, "a"], kwargs={"k": True}, priority=9, paused=True)
    assert decode(encode(original)) == original
    with pytest.raises(ValidationError, match="invalid schedule"):
        decode(b'{"name": "s", "task": "t.run", "every_s": "soon"}')
    with pytest.raises(ValidationError, match="invalid schedule"):
        decode(b"{not json")
    with pytest.raises(ValidationError, match="exactly one"):
        decode(b'{"name": "s", "task": "t.run"}')


def test_a_code_declared_schedule_converts_to_a_spec() -> None:
    declared = Schedule(name="s", task="t.run", queue="q", cron="@hourly", kwargs={"a": 1})
    converted = ScheduleSpec.from_schedule(declared)
    assert converted == ScheduleSpec(
        name="s", task="t.run", queue="q", cron="@hourly", kwargs={"a": 1}
    )


# -- tick math -------------------------------------------------------------------------------


def test_interval_ticks_are_multiples_of_the_interval_since_the_epoch() -> None:
    every_5m = spec(every_s=300)
    assert next_fire(every_5m, T0) == T0 + 120  # 00:05
    assert next_fire(every_5m, T0 + 120) == T0 + 420  # strictly after: 00:10
    assert due_ticks(every_5m, T0, T0 + 1000) == [T0 + 120, T0 + 420, T0 + 720]
    assert due_ticks(every_5m, T0 + 120, T0 + 120) == []
    assert due_ticks(every_5m, T0 - 1, T0 + 120) == [T0 + 120]  # a tick at now is due


def test_cron_ticks_are_read_in_utc() -> None:
    every_5m = spec(every_s=None, cron="*/5 * * * *")
    assert next_fire(every_5m, T0) == T0 + 120
    assert due_ticks(every_5m, T0, T0 + 1000) == [T0 + 120, T0 + 420, T0 + 720]
    assert due_ticks(every_5m, T0 + 120, T0 + 419.999) == []
    weekdays_8am = spec(every_s=None, cron="0 8 * * 1-5")
    assert datetime.fromtimestamp(next_fire(weekdays_8am, T0), UTC) == datetime(
        2024, 1, 1, 8, 0, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("0 0 L * *", datetime(2024, 1, 31, 0, 0, tzinfo=UTC)),  # the last day of the month
        ("0 0 * * 1#2", datetime(2024, 1, 8, 0, 0, tzinfo=UTC)),  # the second Monday
        ("0 12 ? * MON", datetime(2024, 1, 1, 12, 0, tzinfo=UTC)),
        ("0 9 14W * *", datetime(2024, 1, 15, 9, 0, tzinfo=UTC)),  # the 14th is a Sunday
        ("@daily", datetime(2024, 1, 2, 0, 0, tzinfo=UTC)),
    ],
)
def test_next_fire_at_is_the_next_tick_of_every_accepted_cron_form(
    cron: str, expected: datetime
) -> None:
    s = validate(spec(every_s=None, cron=cron))
    assert next_fire_at(s, T0) == expected
    assert next_fire_at(s, T0) == datetime.fromtimestamp(next_fire(s, T0), UTC)


def test_next_fire_at_of_an_interval_and_of_a_paused_schedule() -> None:
    assert next_fire_at(spec(every_s=300), T0) == datetime(2024, 1, 1, 0, 5, tzinfo=UTC)
    assert next_fire_at(spec(every_s=300, paused=True), T0) is None
    assert next_fire_at(spec(every_s=None, cron="0 0 L * *", paused=True), T0) is None


@pytest.mark.parametrize("kind", [{"every_s": 60}, {"every_s": None, "cron": "* * * * *"}])
def test_due_ticks_lists_only_the_latest_after_a_long_gap(kind: dict[str, object]) -> None:
    s = spec(**kind)
    week = 7 * 86400
    ticks = due_ticks(s, T0, T0 + week, limit=100)
    assert len(ticks) == 100
    assert ticks[-1] == T0 + week  # now is on a whole minute: that tick is due
    assert ticks[0] == T0 + week - 99 * 60
    assert ticks == sorted(ticks)


def test_the_idempotency_key_names_the_schedule_and_the_tick_in_ms() -> None:
    assert idempotency_key("nightly", 1704067200.0) == "schedule:nightly:1704067200000"


# -- store -----------------------------------------------------------------------------------


@pytest.fixture
def store(redis: aioredis.Redis, settings: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(settings.namespace), max_payload_bytes=1000)


async def test_put_get_list_delete(store: ScheduleStore, redis: aioredis.Redis) -> None:
    a, b = spec(name="b-second"), spec(name="a-first", every_s=None, cron="@daily")
    assert await store.put(a) is True
    assert await store.put(b) is True
    assert await store.put(msgspec.structs.replace(a, priority=9)) is False

    assert await store.get("missing") is None
    assert await store.get("b-second") == msgspec.structs.replace(a, priority=9)
    assert [s.name for s in await store.list()] == ["a-first", "b-second"]

    await store.set_watermark("a-first", 123)
    assert await store.delete("a-first") is not None
    assert await store.delete("a-first") is None
    assert await store.watermarks() == {}
    assert await redis.hkeys(store.keys.schedules) == ["b-second"]


async def test_an_invalid_put_writes_nothing(store: ScheduleStore, redis: aioredis.Redis) -> None:
    with pytest.raises(ValidationError, match="DTQ_MAX_PAYLOAD_BYTES=1000"):
        await store.put(spec(args=["x" * 2000]))
    assert await redis.exists(store.keys.schedules) == 0


async def test_an_undecodable_stored_value_is_skipped_by_list(
    store: ScheduleStore, redis: aioredis.Redis
) -> None:
    await store.put(spec(name="good"))
    await redis.hset(store.keys.schedules, "junk", "{oops")
    with capture_logs() as logs:
        listed = await store.list()
    assert [s.name for s in listed] == ["good"]
    assert [(e["event"], e["schedule"]) for e in logs] == [("schedule_skipped", "junk")]


async def test_pause_and_resume(store: ScheduleStore) -> None:
    await store.put(spec(name="s"))
    paused = await store.pause("s")
    assert paused is not None
    assert paused.paused
    assert (await store.get("s")) == paused
    before = await store.now_ms()

    resumed = await store.resume("s")

    assert resumed is not None
    assert not resumed.paused
    assert (await store.watermarks())["s"] >= before  # ticks missed while paused never fire
    assert await store.pause("missing") is None
    assert await store.resume("missing") is None


async def test_the_first_watermark_wins(store: ScheduleStore) -> None:
    assert await store.init_watermark("s", 100) == 100
    assert await store.init_watermark("s", 200) == 100
